package faulty_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/faulty"
	"github.com/rdmago/rdmago/verbs/loop"
)

// Two loop devices wrapped with one injector: a post fails on command, a
// completion is lost, and the link drops.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inj := faulty.NewInjector()
	open := func() (verbs.QP, verbs.CQ, verbs.MR, func()) {
		d, err := loop.Open(ctx, loop.Options{})
		if err != nil {
			panic(err)
		}
		dev := faulty.Wrap(d, inj)
		pd, _ := dev.AllocPD()
		cq, _ := dev.CreateCQ(16)
		mr, _ := pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		qp, _ := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		return qp, cq, mr, func() { dev.Close() }
	}
	qa, cqa, mra, closeA := open()
	defer closeA()
	qb, _, mrb, closeB := open()
	defer closeB()
	o := verbs.DefaultConnectOptions()
	o.Timeout, o.RetryCnt = 10, 2 // a lost peer is noticed in milliseconds
	_ = verbs.Connect(qa, qb.Address(), o)
	_ = verbs.Connect(qb, qa.Address(), o)
	write := func(id uint64) verbs.SendWR {
		return verbs.SendWR{ID: id, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(mra, 0, 8)}, RemoteAddr: mrb.Addr(), RKey: mrb.RKey()}
	}
	next := func() verbs.WC {
		var wc [1]verbs.WC
		for cqa.Poll(wc[:]) == 0 {
			if err := cqa.Wait(ctx); err != nil {
				panic(err)
			}
		}
		return wc[0]
	}

	inj.FailPosts(1, verbs.ErrQueueFull, nil)
	err := qa.PostSend(write(1))
	fmt.Println("injected post failure is ErrQueueFull:", errors.Is(err, verbs.ErrQueueFull))

	inj.DropCompletions(1, faulty.ID(2))
	_ = qa.PostSend(write(2), write(3))
	fmt.Println("first completion:", next().ID)

	_ = inj.Disconnect(qa.Num())
	_ = qa.PostSend(write(4))
	wc := next()
	fmt.Println("after disconnect:", wc.ID, wc.Status)
	// Output:
	// injected post failure is ErrQueueFull: true
	// first completion: 3
	// after disconnect: 4 RETRY_EXC_ERR
}
