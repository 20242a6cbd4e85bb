package comm_test

import (
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/testbin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A rank that panics inside a collective runs its deferred Close before
// the runtime prints the trace. That Close must not wait out its bound for
// the other ranks, which still wait for the panicking one: the trace has
// to reach the user promptly, and the launcher has to end the job. The
// rank program lets Close wait up to a minute (testprog -panic-rank);
// a job that ends within the bound below did not wait it out.
func TestRdmarunPanicTraceIsPrompt(t *testing.T) {
	buildJobBinaries(t)
	const bound = 25 * time.Second // generous for a loaded machine; the old wait was 60 s
	for _, transport := range []string{"shm", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			r := testbin.Run(t, 90*time.Second, testbin.Environ("RDMARUN_*", "RDMAGO_*"), rdmarunBin,
				"-np", "3", "--transport", transport, "--connect-timeout", "30s", progBin, "-panic-rank", "1")
			errOut := r.Stderr
			require.Equal(t, 2, r.Code, "an unrecovered panic exits with status 2:\n%s", r)
			assert.Contains(t, errOut, "testprog: rank 1 panics in its reduction")
			assert.Contains(t, errOut, "panic: testprog: rank 1 panics as told")
			assert.Contains(t, errOut, "main.panicInCollective", "the trace reaches the user whole")
			assert.Less(t, r.Elapsed, bound, "the job with a panicking rank took too long:\n%s", r)
		})
	}
}
