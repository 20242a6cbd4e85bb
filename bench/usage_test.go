package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Every rank of a job parses the same command line; the usage (-h) and a
// bad command line are reported once for the job, by rank 0, not once per
// rank.
func TestUsageOncePerJob(t *testing.T) {
	binaries(t)
	stdout, stderr, code := job(t, 3, "-h")
	assert.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Equal(t, 1, strings.Count(stderr, "usage: rdmarun -np N rdmabench TEST"), "usage printed once:\n%s", stderr)
	assert.Equal(t, 1, strings.Count(stderr, "\nAlgorithms:\n"), stderr)

	stdout, stderr, code = job(t, 3, "nosuchtest")
	assert.Equal(t, 2, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Equal(t, 1, strings.Count(stderr, `rdmabench: unknown TEST "nosuchtest"`), "error printed once:\n%s", stderr)
}
