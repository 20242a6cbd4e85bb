package comm_test

import (
	"context"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/comm"
)

var rdmarunVars = []string{"RDMARUN_RANK", "RDMARUN_SIZE", "RDMARUN_LOCAL_RANK", "RDMARUN_LOCAL_SIZE",
	"RDMARUN_ADDR", "RDMARUN_JOB", "RDMARUN_TOKEN", "RDMARUN_TRANSPORT", "RDMARUN_TIMEOUT"}

// clearEnv unsets every launcher variable for the test (t.Setenv restores
// them afterwards).
func clearEnv(t *testing.T) {
	for _, k := range append(rdmarunVars, "RDMARUN_INSECURE", "PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT", "PMI_ID", "PMIX_RANK", "PMIX_NAMESPACE",
		"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEPID",
		"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE") {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
}

func TestFromEnvOneRank(t *testing.T) {
	clearEnv(t)
	token, err := bootstrap.NewToken()
	require.NoError(t, err)
	srv, err := bootstrap.NewServer(bootstrap.ServerOptions{Token: token, Size: 1})
	require.NoError(t, err)
	defer srv.Close()
	for k, v := range map[string]string{
		"RDMARUN_RANK": "0", "RDMARUN_SIZE": "1", "RDMARUN_LOCAL_RANK": "0", "RDMARUN_LOCAL_SIZE": "1",
		"RDMARUN_ADDR": srv.Addr(), "RDMARUN_JOB": "0123456789abcdef", "RDMARUN_TOKEN": hex.EncodeToString(token),
		"RDMARUN_TRANSPORT": "tcp", "RDMARUN_TIMEOUT": "10s",
	} {
		t.Setenv(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := comm.FromEnv(ctx)
	require.NoError(t, err)
	_, set := os.LookupEnv("RDMARUN_TOKEN")
	assert.False(t, set, "FromEnv must unset RDMARUN_TOKEN")
	assert.Equal(t, 0, c.Rank())
	assert.Equal(t, 1, c.Size())
	assert.Equal(t, 0, c.LocalRank())
	assert.Equal(t, 1, c.LocalSize())
	buf := []int32{3, 4}
	require.NoError(t, comm.Allreduce(ctx, c, buf, comm.Sum))
	assert.Equal(t, []int32{3, 4}, buf)
	require.NoError(t, c.Close())
}

func TestFromEnvErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	clearEnv(t)
	_, err := comm.FromEnv(ctx)
	require.ErrorIs(t, err, comm.ErrLauncher)
	assert.Contains(t, err.Error(), "rdmarun")
	assert.Contains(t, err.Error(), "srun --mpi=pmi2")
	var oe *comm.OpError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "FromEnv", oe.Op)

	good := map[string]string{
		"RDMARUN_RANK": "0", "RDMARUN_SIZE": "2", "RDMARUN_LOCAL_RANK": "0", "RDMARUN_LOCAL_SIZE": "2",
		"RDMARUN_ADDR": "127.0.0.1:1", "RDMARUN_JOB": "j1", "RDMARUN_TOKEN": "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
		"RDMARUN_TRANSPORT": "auto", "RDMARUN_TIMEOUT": "1s",
	}
	for _, tc := range []struct{ k, v, want string }{
		{"RDMARUN_RANK", "two", `RDMARUN_RANK="two"`},
		{"RDMARUN_SIZE", "", `RDMARUN_SIZE=""`},
		{"RDMARUN_ADDR", "nowhere", `RDMARUN_ADDR="nowhere"`},
		{"RDMARUN_TRANSPORT", "carrier-pigeon", `RDMARUN_TRANSPORT="carrier-pigeon"`},
		{"RDMARUN_TIMEOUT", "soon", `RDMARUN_TIMEOUT="soon"`},
		{"RDMARUN_TOKEN", "secret", `RDMARUN_TOKEN="<6 characters, not shown>"`},
		{"RDMARUN_JOB", "-", `RDMARUN_JOB is not set`},
	} {
		clearEnv(t)
		for k, v := range good {
			t.Setenv(k, v)
		}
		if tc.v == "-" {
			os.Unsetenv(tc.k)
		} else {
			t.Setenv(tc.k, tc.v)
		}
		_, err := comm.FromEnv(ctx)
		require.Error(t, err, tc.k)
		assert.ErrorIs(t, err, comm.ErrLauncher, tc.k)
		assert.Contains(t, err.Error(), tc.want)
	}

	// Extra rendezvous options are refused, and so is more than one Options.
	clearEnv(t)
	_, err = comm.FromEnv(ctx, comm.Options{Addr: "127.0.0.1:5"})
	assert.ErrorIs(t, err, comm.ErrInvalidArgument)
	_, err = comm.FromEnv(ctx, comm.Options{}, comm.Options{})
	assert.ErrorIs(t, err, comm.ErrInvalidArgument)

	// A bad tuning variable is named too.
	clearEnv(t)
	t.Setenv("RDMAGO_ALLREDUCE_ALGO", "bogus")
	_, err = comm.FromEnv(ctx, comm.Options{Singleton: true})
	require.ErrorIs(t, err, comm.ErrInvalidArgument)
	assert.Contains(t, err.Error(), `RDMAGO_ALLREDUCE_ALGO="bogus"`)
	t.Setenv("RDMAGO_ALLREDUCE_ALGO", "bcast")
	_, err = comm.FromEnv(ctx, comm.Options{Singleton: true})
	require.ErrorIs(t, err, comm.ErrInvalidArgument)
	t.Setenv("RDMAGO_ALLREDUCE_ALGO", "")
	t.Setenv("RDMAGO_DEBUG", "maybe")
	_, err = comm.FromEnv(ctx, comm.Options{Singleton: true})
	require.ErrorIs(t, err, comm.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "RDMAGO_DEBUG")
}

func TestFromEnvSingleton(t *testing.T) {
	clearEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.Setenv("RDMAGO_ALLREDUCE_ALGO", "ring")
	c, err := comm.FromEnv(ctx, comm.Options{Singleton: true})
	require.NoError(t, err)
	assert.Equal(t, 0, c.Rank())
	assert.Equal(t, 1, c.Size())
	buf := []float64{1.5}
	require.NoError(t, comm.Allreduce(ctx, c, buf, comm.Sum))
	assert.Equal(t, 1.5, buf[0])
	require.NoError(t, c.Close())

	// Singleton does not paper over a broken environment.
	t.Setenv("RDMARUN_RANK", "0")
	_, err = comm.FromEnv(ctx, comm.Options{Singleton: true})
	require.ErrorIs(t, err, comm.ErrLauncher)
	assert.False(t, errors.Is(err, comm.ErrClosed))
}

// Launchers other than rdmarun (comm/internal/launchers): the torchrun
// convention with one rank in this process; the multi-rank jobs through
// the real launchers are comm/internal/launchers' real_test.go.
func TestFromEnvTorchrunOneRank(t *testing.T) {
	clearEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	for k, v := range map[string]string{"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
		"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "RDMARUN_TOKEN": strings.Repeat("ab", 32), "RDMARUN_TRANSPORT": "tcp"} {
		t.Setenv(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := comm.FromEnv(ctx)
	require.NoError(t, err)
	_, set := os.LookupEnv("RDMARUN_TOKEN")
	assert.False(t, set, "FromEnv must unset RDMARUN_TOKEN")
	assert.Equal(t, 1, c.Size())
	assert.Equal(t, 0, c.LocalRank())
	buf := []int64{5}
	require.NoError(t, comm.Allreduce(ctx, c, buf, comm.Sum))
	assert.Equal(t, []int64{5}, buf)
	require.NoError(t, c.Close())
}

func TestFromEnvLauncherErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"RANK without WORLD_SIZE", map[string]string{"RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, []string{"WORLD_SIZE"}},
		{"rank out of range", map[string]string{"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
			"RDMARUN_TOKEN": strings.Repeat("ab", 32)}, []string{"RANK", `"4"`}},
		{"torchrun without a token", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
			[]string{"RDMARUN_TOKEN", "RDMARUN_INSECURE"}},
		{"mpirun without RDMARUN_ADDR", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, []string{"RDMARUN_ADDR", "-x"}},
		{"plain srun", map[string]string{"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0"}, []string{"add --mpi=pmi2"}},
		{"PMI rank without the rest", map[string]string{"PMI_RANK": "0"}, []string{"PMI_"}},
		{"bad PMI_FD", map[string]string{"PMI_FD": "x", "PMI_RANK": "0", "PMI_SIZE": "2"}, []string{`PMI_FD="x"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, err := comm.FromEnv(ctx, comm.Options{Singleton: true})
			require.Error(t, err)
			assert.ErrorIs(t, err, comm.ErrLauncher)
			var oe *comm.OpError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, "FromEnv", oe.Op)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}

	// Inside an allocation but not a job step: no launcher, saying so.
	clearEnv(t)
	t.Setenv("SLURM_JOB_ID", "7")
	_, err := comm.FromEnv(ctx)
	require.ErrorIs(t, err, comm.ErrLauncher)
	assert.Contains(t, err.Error(), "inside Slurm allocation 7")

	// RDMARUN_ADDR alone, as passed to ranks by hand, is no launcher; the
	// error says what is missing.
	clearEnv(t)
	t.Setenv("RDMARUN_ADDR", "127.0.0.1:5")
	_, err = comm.FromEnv(ctx)
	require.ErrorIs(t, err, comm.ErrLauncher)
	assert.Contains(t, err.Error(), "RDMARUN_ADDR is set")
}
