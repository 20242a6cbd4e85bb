//go:build !race

package shm

func raceAcquire() {}
func raceRelease() {}
