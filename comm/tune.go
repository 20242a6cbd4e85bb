package comm

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm/internal/jobenv"
)

// Tuning variables, read by Init and FromEnv (unless Options.NoEnv) and
// passed down as collectives.Options: nothing below comm reads the
// environment.
const (
	// EnvAlgorithms forces algorithms for several collectives:
	// "allreduce=ring,bcast=chain".
	EnvAlgorithms = "RDMAGO_ALGORITHMS"
	// EnvDebug=1 cross-checks every collective's arguments among the ranks
	// (collectives.Options.Debug).
	EnvDebug = "RDMAGO_DEBUG"
	// EnvDeterministic=1 makes reductions independent of message size and
	// algorithm (collectives.Options.Deterministic).
	EnvDeterministic = "RDMAGO_DETERMINISTIC"
	// EnvTune sets the cost model's parameters and thresholds by name:
	// "shm_small_bytes=32K,alpha=2us" (collectives.ParseTuning; the names
	// are collectives.Tunables).
	EnvTune = "RDMAGO_TUNE"
)

// envAlgo returns the per-collective override variable for c, e.g.
// RDMAGO_ALLREDUCE_ALGO=ring. It wins over RDMAGO_ALGORITHMS.
func envAlgo(c collectives.Collective) string {
	return "RDMAGO_" + strings.ToUpper(c.String()) + "_ALGO"
}

// tuningFromEnv merges the RDMAGO_* variables into o. Explicit settings in
// o win: an algorithm already in o.Algorithms, Debug or Deterministic
// already true, a tunable already nonzero.
func tuningFromEnv(env jobenv.LookupEnv, o collectives.Options) (collectives.Options, error) {
	if v, ok := env(EnvTune); ok && strings.TrimSpace(v) != "" {
		var t collectives.Options
		if err := collectives.ParseTuning(v, &t); err != nil {
			return o, fmt.Errorf("%w: %s=%q: %w", ErrInvalidArgument, EnvTune, v, err)
		}
		o = collectives.MergeTuning(o, t)
	}
	algos := map[collectives.Collective]collectives.Algorithm{}
	if v, ok := env(EnvAlgorithms); ok && strings.TrimSpace(v) != "" {
		m, err := collectives.ParseAlgorithms(v)
		if err != nil {
			return o, fmt.Errorf("%w: %s=%q: %w", ErrInvalidArgument, EnvAlgorithms, v, err)
		}
		maps.Copy(algos, m)
	}
	for _, c := range collectives.Collectives() {
		k := envAlgo(c)
		v, ok := env(k)
		if !ok || v == "" {
			continue
		}
		a, err := collectives.ParseAlgorithm(v)
		if err != nil {
			return o, fmt.Errorf("%w: %s=%q: %w (%s has %v)", ErrInvalidArgument, k, v, err, c, collectives.Algorithms(c))
		}
		if a != collectives.Auto && !contains(collectives.Algorithms(c), a) {
			return o, fmt.Errorf("%w: %s=%q: %s has no algorithm %s (have %v)", ErrInvalidArgument, k, v, c, a, collectives.Algorithms(c))
		}
		algos[c] = a
	}
	if len(algos) > 0 {
		merged := maps.Clone(o.Algorithms)
		if merged == nil {
			merged = map[collectives.Collective]collectives.Algorithm{}
		}
		for c, a := range algos {
			if cur, ok := merged[c]; !ok || cur == collectives.Auto {
				merged[c] = a
			}
		}
		o.Algorithms = merged
	}
	for _, b := range []struct {
		k   string
		dst *bool
	}{{EnvDebug, &o.Debug}, {EnvDeterministic, &o.Deterministic}} {
		v, ok := env(b.k)
		if !ok || v == "" {
			continue
		}
		on, err := strconv.ParseBool(v)
		if err != nil {
			return o, fmt.Errorf("%w: %s=%q: want 1 or 0", ErrInvalidArgument, b.k, v)
		}
		*b.dst = *b.dst || on
	}
	return o, nil
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
