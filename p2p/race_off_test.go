//go:build !race

package p2p_test

const raceOn = false
