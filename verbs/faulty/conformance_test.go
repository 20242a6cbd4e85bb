package faulty_test

import (
	"context"
	"testing"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/faulty"
	"github.com/rdmago/rdmago/verbs/loop"
	"github.com/rdmago/rdmago/verbs/verbstest"
)

// With no rules the wrapper is transparent: it passes the conformance
// suite exactly as the provider it wraps does.
func TestConformance(t *testing.T) {
	for _, synth := range []bool{false, true} {
		name := "InnerDisconnect"
		if synth {
			name = "SynthesizedDisconnect"
		}
		t.Run(name, func(t *testing.T) {
			inj := faulty.NewInjector()
			inj.SynthesizeDisconnects(synth)
			verbstest.Run(t, verbstest.Options{
				Open: func(ctx context.Context) (verbs.Device, error) {
					d, err := loop.Open(ctx, loop.Options{})
					if err != nil {
						return nil, err
					}
					return faulty.Wrap(d, inj), nil
				},
			})
			if synth {
				if s := inj.Stats(); s.SynthesizedLoss < 2 || s.RetryExcReported < 2 {
					t.Errorf("the synthesized disconnect was not exercised: %+v", s)
				}
			}
		})
	}
}
