package comm_test

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
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
	for _, k := range append(rdmarunVars, "PMI_FD", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "RANK", "WORLD_SIZE", "MASTER_ADDR") {
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
	assert.Contains(t, err.Error(), "rdmarun -np")
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
