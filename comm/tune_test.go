package comm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm"
)

// TestTuneEnv: RDMAGO_TUNE sets the cost model's parameters by name;
// settings made in Options win, and the Options' Model is not written.
func TestTuneEnv(t *testing.T) {
	t.Parallel()
	explicit := &collectives.Model{Alpha: 5 * time.Microsecond}
	o, err := comm.TuningFromEnv(map[string]string{comm.EnvTune: "shm_small_bytes=32K, alpha=2us,inline_bytes=16K"},
		collectives.Options{Model: explicit})
	require.NoError(t, err)
	require.Equal(t, 32<<10, o.Model.ShmSmallBytes)
	require.Equal(t, 5*time.Microsecond, o.Model.Alpha, "Options win over the environment")
	require.Equal(t, 16<<10, o.InlineBytes)
	require.Equal(t, collectives.Model{Alpha: 5 * time.Microsecond}, *explicit, "the caller's Model is not changed")

	for _, c := range []struct{ v, want string }{
		{"shm_small_bytes=lots", `shm_small_bytes="lots"`},
		{"shm_smal_bytes=1K", `unknown tunable "shm_smal_bytes"`},
		{"alpha=-3us", `alpha="-3us"`},
		{"post_overlap", `"post_overlap" is not name=value`},
	} {
		_, err := comm.TuningFromEnv(map[string]string{comm.EnvTune: c.v}, collectives.Options{})
		require.ErrorIs(t, err, comm.ErrInvalidArgument, c.v)
		require.ErrorContains(t, err, comm.EnvTune, c.v)
		require.ErrorContains(t, err, c.want, c.v)
	}
}

// TestTuneEnvReachesEngine: a parameter set in RDMAGO_TUNE changes what
// Auto runs. Small alltoall blocks on four ranks post every message at
// once (linear) because each further message costs a quarter of a
// latency; at a hundred latencies each, Auto takes a stepwise form.
func TestTuneEnvReachesEngine(t *testing.T) {
	run := func() string {
		var alg string
		errs := runEnv(t, 4, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
			send, recv := make([]int32, 4), make([]int32, 4)
			if err := comm.Alltoall(ctx, c, send, recv); err != nil {
				return err
			}
			if c.Rank() == 0 {
				alg = c.LastAlgorithm()
			}
			return nil
		})
		requireOK(t, errs)
		return alg
	}
	require.Equal(t, "linear", run())
	t.Setenv(comm.EnvTune, "post_overlap=100")
	got := run()
	require.NotEqual(t, "linear", got, fmt.Sprintf("%s=post_overlap=100", comm.EnvTune))
}
