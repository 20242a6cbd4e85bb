package verbstest

import (
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

// hub is one side of many connections: one PD, one MR, one send CQ and one
// receive CQ shared by n QPs.
type hub struct {
	dev      verbs.Device
	pd       verbs.PD
	scq, rcq verbs.CQ
	mr       verbs.MR
	qps      []verbs.QP
}

// newHubs builds two hubs of n QPs each and connects a.qps[i] to b.qps[i].
func (s *suite) newHubs(t *testing.T, n int, cfg pairConfig) (a, b *hub) {
	t.Helper()
	da, db := s.devA, s.devB
	if cfg.sameDevice {
		db = da
	}
	a, b = s.newHub(t, da, n, cfg), s.newHub(t, db, n, cfg)
	for i := range n {
		s.connect(t, a.qps[i], b.qps[i], s.opts.Connect, s.opts.Connect)
	}
	return a, b
}

func (s *suite) newHub(t *testing.T, dev verbs.Device, n int, cfg pairConfig) *hub {
	t.Helper()
	h := &hub{dev: dev}
	var err error
	h.pd, err = dev.AllocPD()
	if err != nil {
		t.Fatalf("AllocPD: %v", err)
	}
	t.Cleanup(func() { closeBounded(t, "PD.Close", s.opts.CaseTimeout, h.pd.Close) })
	cap := cfg.cap
	if cap == (verbs.QPCap{}) {
		cap = s.defaultCap(dev)
	}
	c := dev.Caps()
	h.scq = s.newCQ(t, dev, min(n*cap.MaxSendWR, c.MaxCQE))
	h.rcq = s.newCQ(t, dev, min(n*cap.MaxRecvWR, c.MaxCQE))
	size := cfg.mrSize
	if size == 0 {
		size = 64 << 10
	}
	h.mr = s.allocMR(t, h.pd, size, allAccess)
	for range n {
		h.qps = append(h.qps, s.newQP(t, h.pd, verbs.QPInitAttr{SendCQ: h.scq, RecvCQ: h.rcq, Cap: cap}))
	}
	return h
}
