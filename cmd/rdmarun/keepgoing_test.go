package main_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// With --keep-going, a killed rank does not stop the others: they run
// to their end, and the rendezvous, still up, tells them the rank left.
// rdmarun still exits with the killed rank's status.
func TestKeepGoing(t *testing.T) {
	dir := t.TempDir()
	r := run(t, nil, "-np", "3", "--keep-going", testprogBin, "-kill-rank", "1", "-await-left", "1", "-piddir", dir)
	assert.Equal(t, 128+9, r.code, "the killed rank's status")
	// The survivors may see the departure and end before rdmarun reaps
	// the killed rank, so the count left running is anything from 0 to 2.
	assert.Regexp(t, `rank 1 \(host localhost, pid \d+\) was killed by signal SIGKILL; --keep-going: leaving [0-2] other ranks? running`, r.stderr)
	assert.Regexp(t, `job \w+ failed: rank 1 \(host localhost, pid \d+\) was killed by signal SIGKILL \(--keep-going: the other ranks ran on\)`, r.stderr)
	for _, rank := range []string{"0", "2"} {
		assert.Regexp(t, `rank `+rank+` saw: rank 1 lost its connection`, r.stdout)
	}
	pidsGone(t, dir, 3)
}

// Without it (the default), the same job stops the others: they never
// see the departure.
func TestKeepGoingDefaultStops(t *testing.T) {
	dir := t.TempDir()
	r := run(t, nil, "-np", "3", "--grace", "1s", testprogBin, "-kill-rank", "1", "-await-left", "1", "-sleep", "60s", "-piddir", dir)
	assert.Equal(t, 128+9, r.code)
	assert.Regexp(t, `rank 1 \(host localhost, pid \d+\) was killed by signal SIGKILL; stopping the other 2 ranks`, r.stderr)
	pidsGone(t, dir, 3)
}
