package thiscpu

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestIDIsUnknownOrACPU: ID is -1 only where it cannot tell, and otherwise
// one of the machine's CPUs.
func TestIDIsUnknownOrACPU(t *testing.T) {
	id := ID()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		assert.Equal(t, -1, id)
		return
	}
	assert.GreaterOrEqual(t, id, 0)
	assert.Less(t, id, 4096)
}

func BenchmarkID(b *testing.B) {
	for b.Loop() {
		ID()
	}
}
