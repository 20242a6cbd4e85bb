package verbstest_test

import (
	"context"
	"math/bits"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/faulty"
	"github.com/rdmago/rdmago/verbs/loop"
	"github.com/rdmago/rdmago/verbs/verbstest"
)

// The suite must fail on a provider that breaks the rules. Each mutant is
// the loop provider behind a faulty injector that breaks one rule; the test
// binary re-runs itself with the mutant selected and a few cases enabled,
// and checks which cases failed.

const mutantEnv = "RDMAGO_VERBSTEST_MUTANT"

var mutants = map[string]func(inj *faulty.Injector){
	// A completion is lost.
	"lose-completion": func(inj *faulty.Injector) { inj.DropCompletions(1, nil) },
	// A post fails although nothing is wrong with it.
	"fail-post": func(inj *faulty.Injector) { inj.FailPosts(1, verbs.ErrQueueFull, nil) },
	// Immediate data comes back byte-swapped.
	"imm-byte-order": func(inj *faulty.Injector) {
		inj.CorruptCompletions(-1, func(wc verbs.WC) bool { return wc.Flags&verbs.WCWithImm != 0 },
			func(wc *verbs.WC) { wc.Imm = bits.ReverseBytes32(wc.Imm) })
	},
	// A remote access violation is reported with the wrong status.
	"wrong-nak-status": func(inj *faulty.Injector) {
		inj.CorruptCompletions(-1, func(wc verbs.WC) bool { return wc.Status == verbs.StatusRemAccessErr },
			func(wc *verbs.WC) { wc.Status = verbs.StatusRemOpErr })
	},
	// Every completion is late: a slow device, which is no bug.
	"slow-device": func(inj *faulty.Injector) { inj.DelayCompletions(-1, time.Millisecond, nil) },
}

func TestMutantChild(t *testing.T) {
	m := os.Getenv(mutantEnv)
	if m == "" {
		t.Skip("runs only as the child of TestSuiteCatchesMutants")
	}
	inj := faulty.NewInjector()
	mutants[m](inj)
	// A mutant that loses a completion fails by timeout: keep it short.
	// The slow device must pass, so it gets the default.
	timeout := 2 * time.Second
	if m == "slow-device" {
		timeout = 0
	}
	verbstest.Run(t, verbstest.Options{
		Open: func(ctx context.Context) (verbs.Device, error) {
			d, err := loop.Open(ctx, loop.Options{})
			if err != nil {
				return nil, err
			}
			return faulty.Wrap(d, inj), nil
		},
		CaseTimeout: timeout,
		Skip:        map[string]string{"Ops/Large": "the mutants do not need it, and it is the slowest case"},
	})
}

func TestSuiteCatchesMutants(t *testing.T) {
	if os.Getenv(mutantEnv) != "" || os.Getenv("RDMAGO_VERBSTEST_PEER") != "" {
		t.Skip("not in a child")
	}
	for _, tc := range []struct {
		mutant string
		run    string // -test.run below TestMutantChild
		fails  []string
	}{
		{"lose-completion", "^Ops$/^Send$", []string{"Ops/Send/TwoDevices"}},
		{"fail-post", "^Ops$/^Send$", []string{"Ops/Send/TwoDevices"}},
		{"imm-byte-order", "^Ops$/^(SendWithImm|RDMAWriteWithImm)$", []string{"Ops/SendWithImm/TwoDevices", "Ops/RDMAWriteWithImm/TwoDevices"}},
		{"wrong-nak-status", "^Errors$/^(BadRKey|OutOfRange)$", []string{"Errors/BadRKey/RDMA_WRITE", "Errors/OutOfRange/WritePastEnd"}},
		{"slow-device", "^(Ops|Ordering|RNR|Errors)$", nil},
	} {
		t.Run(tc.mutant, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMutantChild$/"+tc.run, "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), mutantEnv+"="+tc.mutant)
			out, err := cmd.CombinedOutput()
			if tc.fails == nil {
				require.NoError(t, err, "the suite failed a provider that is only slow:\n%s", out)
				require.Contains(t, string(out), "--- PASS: TestMutantChild/Ordering")
				return
			}
			require.Error(t, err, "the suite passed mutant %s:\n%s", tc.mutant, out)
			for _, name := range tc.fails {
				require.True(t, strings.Contains(string(out), "--- FAIL: TestMutantChild/"+name+" "),
					"mutant %s: case %s did not fail:\n%s", tc.mutant, name, out)
			}
		})
	}
}
