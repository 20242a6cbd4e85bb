package comm

import (
	"fmt"

	"github.com/rdmago/rdmago/comm/internal/jobenv"
	"github.com/rdmago/rdmago/verbs/ibv"
)

// EnvIBHCA selects the RDMA device and port the ibv transport uses, in
// NCCL_IB_HCA's syntax ("mlx5_0:1,mlx5_1", "^mlx5_2", "=rxe1"; see
// ibv.ParseDevices). Read by Init and FromEnv unless Options.NoEnv;
// Options.IBDevices wins over it.
const EnvIBHCA = "RDMAGO_IB_HCA"

// ibDevices returns the ibv device selection: the explicit one, else the
// environment's. A malformed selection fails here, naming where it came
// from, before any rank touches a device.
func ibDevices(env jobenv.LookupEnv, explicit string) (string, error) {
	if explicit != "" {
		if _, err := ibv.ParseDevices(explicit); err != nil {
			return "", fmt.Errorf("%w: Options.IBDevices: %w", ErrInvalidArgument, err)
		}
		return explicit, nil
	}
	if env == nil {
		return "", nil
	}
	v, ok := env(EnvIBHCA)
	if !ok || v == "" {
		return "", nil
	}
	if _, err := ibv.ParseDevices(v); err != nil {
		return "", fmt.Errorf("%w: %s=%q: %w", ErrInvalidArgument, EnvIBHCA, v, err)
	}
	return v, nil
}
