package comm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
)

func TestIBDevicesFromEnv(t *testing.T) {
	env := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k == EnvIBHCA {
				return v, true
			}
			return "", false
		}
	}
	got, err := ibDevices(env("mlx5_0:1,mlx5_1"), "")
	require.NoError(t, err)
	assert.Equal(t, "mlx5_0:1,mlx5_1", got, "the variable when nothing explicit")
	got, err = ibDevices(env("mlx5_0"), "^=rxe0")
	require.NoError(t, err)
	assert.Equal(t, "^=rxe0", got, "Options.IBDevices wins")
	got, err = ibDevices(nil, "")
	require.NoError(t, err)
	assert.Empty(t, got)
	got, err = ibDevices(env(""), "")
	require.NoError(t, err)
	assert.Empty(t, got)

	_, err = ibDevices(env("mlx5_0:0"), "")
	assert.ErrorIs(t, err, ErrInvalidArgument)
	assert.ErrorContains(t, err, `RDMAGO_IB_HCA="mlx5_0:0"`)
	_, err = ibDevices(nil, "a,,b")
	assert.ErrorIs(t, err, ErrInvalidArgument)
	assert.ErrorContains(t, err, "Options.IBDevices")
}

// Init refuses a malformed selection before it touches a device, whichever
// way it came; NoEnv ignores the variable.
func TestInitIBDevices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	initOne := func(o Options) error {
		stores, err := bootstrap.NewMemory(1)
		require.NoError(t, err)
		defer stores[0].Close()
		o.Store = stores[0]
		c, err := Init(ctx, o)
		if err == nil {
			c.Close()
		}
		return err
	}
	t.Setenv(EnvIBHCA, "^rxe0:1")
	err := initOne(Options{})
	assert.ErrorIs(t, err, ErrInvalidArgument)
	assert.ErrorContains(t, err, `RDMAGO_IB_HCA="^rxe0:1"`)
	assert.NoError(t, initOne(Options{NoEnv: true}))
	assert.NoError(t, initOne(Options{IBDevices: "rxe0"}), "one rank opens no ibv device, and the explicit selection wins")
	err = initOne(Options{IBDevices: "rxe0:x"})
	assert.ErrorIs(t, err, ErrInvalidArgument)
	assert.ErrorContains(t, err, "Options.IBDevices")
}
