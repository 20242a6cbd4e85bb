package main_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A package directory that holds no main package is a usage error naming
// the package, not a failure to execute what go build made of it.
func TestNotAMainPackage(t *testing.T) {
	r := run(t, nil, "-np", "2", "./internal/launch")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "./internal/launch is package github.com/rdmago/rdmago/cmd/rdmarun/internal/launch (package launch), not a main package")
	assert.NotContains(t, r.stderr, "fork/exec")
	assert.Empty(t, r.stdout)
}
