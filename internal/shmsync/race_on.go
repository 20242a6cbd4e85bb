//go:build race

package shmsync

// raceEnabled: built with -race, whose atomics are not all sequentially
// consistent (see Asleep).
const raceEnabled = true
