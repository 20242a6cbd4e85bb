//go:build !race

package comm_test

const raceOn = false
