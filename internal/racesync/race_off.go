//go:build !race

package racesync

// Acquire marks that the caller has observed a publication.
func Acquire() {}

// Release marks that the caller is about to publish what it wrote.
func Release() {}
