//go:build !race

package shmsync

const raceEnabled = false
