package bootstrap

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Memory is one rank's view of an in-process store made by NewMemory: the
// whole job lives in one process (ranks are goroutines), as in unit tests
// of the layers above. It follows the Store contract exactly like Client,
// including the errors (missing ranks on timeout, ErrRankLeft after a
// rank's Close, ErrAborted after Abort), and is safe for concurrent use.
type Memory struct {
	g      *memGroup
	rank   int
	seq    atomic.Uint32
	closed atomic.Bool
}

type memGroup struct {
	size     int
	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every change
	kv       map[string][]byte
	counters map[string]int64
	colls    map[uint32]*memColl
	left     []bool
	abort    *AbortInfo
}

type memColl struct {
	kind    byte
	key     string
	first   int
	arrived []bool
	n       int
	vals    [][]byte
	fail    *Error
	unread  int // ranks that have not yet picked up the result
}

// NewMemory returns the stores of the size ranks of one in-process job.
func NewMemory(size int) ([]*Memory, error) {
	if size < 1 || size > MaxSize {
		return nil, &Error{Op: "memory", Err: ErrInvalid, Detail: fmt.Sprintf("job size %d out of range 1..%d", size, MaxSize)}
	}
	g := &memGroup{size: size, changed: make(chan struct{}), kv: map[string][]byte{},
		counters: map[string]int64{}, colls: map[uint32]*memColl{}, left: make([]bool, size)}
	out := make([]*Memory, size)
	for r := range out {
		out[r] = &Memory{g: g, rank: r}
	}
	return out, nil
}

func (g *memGroup) notifyLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// Rank is this store's rank.
func (m *Memory) Rank() int { return m.rank }

// Size is the job size.
func (m *Memory) Size() int { return m.g.size }

// usable reports the error every operation fails with once the store was
// closed or the job aborted. g.mu must be held.
func (m *Memory) usable(op, key string) error {
	if m.closed.Load() {
		return &Error{Op: op, Key: key, Err: errClientClosed}
	}
	if a := m.g.abort; a != nil {
		return &Error{Op: op, Key: key, Err: &AbortError{Info: *a}}
	}
	return nil
}

// Put stores value under key.
func (m *Memory) Put(ctx context.Context, key string, value []byte) error {
	if err := checkKey("put", key); err != nil {
		return err
	}
	if err := checkValue("put", key, value); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return &Error{Op: "put", Key: key, Err: err}
	}
	g := m.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := m.usable("put", key); err != nil {
		return err
	}
	g.kv[key] = slices.Clone(value)
	g.notifyLocked()
	return nil
}

// Get returns the value under key, waiting until it exists or ctx ends.
func (m *Memory) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey("get", key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, &Error{Op: "get", Key: key, Err: err}
	}
	start := time.Now()
	g := m.g
	for {
		g.mu.Lock()
		if err := m.usable("get", key); err != nil {
			g.mu.Unlock()
			return nil, err
		}
		v, ok := g.kv[key]
		ch := g.changed
		g.mu.Unlock()
		if ok {
			return slices.Clone(v), nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, &Error{Op: "get", Key: key, Err: ctx.Err(),
				Detail: fmt.Sprintf("no rank had put the key after %s", roundElapsed(time.Since(start)))}
		}
	}
}

// Add adds delta to the counter key and returns its new value.
func (m *Memory) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey("add", key); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, &Error{Op: "add", Key: key, Err: err}
	}
	g := m.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := m.usable("add", key); err != nil {
		return 0, err
	}
	g.counters[key] += delta
	return g.counters[key], nil
}

// Fence is a barrier over all ranks.
func (m *Memory) Fence(ctx context.Context) error {
	_, err := m.collective(ctx, "fence", kindFence, "", nil)
	return err
}

// Allgather contributes value and returns every rank's, indexed by rank.
func (m *Memory) Allgather(ctx context.Context, key string, value []byte) ([][]byte, error) {
	if err := checkKey("allgather", key); err != nil {
		return nil, err
	}
	if err := checkValue("allgather", key, value); err != nil {
		return nil, err
	}
	return m.collective(ctx, "allgather", kindAllgather, key, value)
}

func (m *Memory) collective(ctx context.Context, op string, kind byte, key string, value []byte) ([][]byte, error) {
	start := time.Now()
	g, r := m.g, m.rank
	if err := ctx.Err(); err != nil {
		return nil, &Error{Op: op, Key: key, Err: err}
	}
	seq := m.seq.Add(1) - 1
	g.mu.Lock()
	if err := m.usable(op, key); err != nil {
		g.mu.Unlock()
		return nil, err
	}
	cl := g.colls[seq]
	if cl == nil {
		cl = &memColl{kind: kind, key: key, first: r, arrived: make([]bool, g.size), vals: make([][]byte, g.size), unread: g.size}
		g.colls[seq] = cl
		var gone []int
		for q, l := range g.left {
			if l {
				gone = append(gone, q)
			}
		}
		if len(gone) > 0 {
			cl.fail = &Error{Err: ErrRankLeft, Ranks: gone, Size: g.size,
				Detail: fmt.Sprintf("%s left the job before %s", FormatRanks(gone), collName(seq, kind, key))}
		}
	}
	cl.arrived[r] = true
	cl.n++
	if cl.fail == nil && (cl.kind != kind || cl.key != key) {
		cl.fail = &Error{Err: ErrMismatch, Ranks: []int{r}, Size: g.size,
			Detail: fmt.Sprintf("rank %d called %s while rank %d called %s", r, collName(seq, kind, key), cl.first, collName(seq, cl.kind, cl.key))}
	}
	if kind == kindAllgather {
		cl.vals[r] = slices.Clone(value)
	}
	g.notifyLocked()
	g.mu.Unlock()

	for {
		g.mu.Lock()
		if err := m.usable(op, key); err != nil {
			g.mu.Unlock()
			return nil, err
		}
		if cl.fail != nil || cl.n == g.size {
			cl.unread--
			if cl.unread == 0 {
				delete(g.colls, seq)
			}
			g.mu.Unlock()
			if cl.fail != nil {
				e := *cl.fail
				e.Op, e.Key = op, key
				return nil, &e
			}
			if kind == kindFence {
				return nil, nil
			}
			out := make([][]byte, len(cl.vals))
			for i, v := range cl.vals {
				out[i] = slices.Clone(v)
			}
			return out, nil
		}
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			g.mu.Lock()
			var missing []int
			for q, a := range cl.arrived {
				if !a {
					missing = append(missing, q)
				}
			}
			g.mu.Unlock()
			return nil, &Error{Op: op, Key: key, Err: ctx.Err(), Ranks: missing, Size: g.size,
				Detail: missingDetail(time.Since(start), missing, g.size, "arrived")}
		}
	}
}

// Abort ends the job: every pending and later operation of every rank
// fails with an *AbortError.
func (m *Memory) Abort(ctx context.Context, code int, reason string) error {
	g := m.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := m.usable("abort", ""); err != nil {
		return err
	}
	if len(reason) > MaxReasonLen {
		reason = reason[:MaxReasonLen]
	}
	g.abort = &AbortInfo{Rank: m.rank, Code: code, Reason: reason}
	g.notifyLocked()
	return nil
}

// Close leaves the job: collectives this rank has not entered fail on the
// other ranks with ErrRankLeft.
func (m *Memory) Close() error {
	if m.closed.Swap(true) {
		return nil
	}
	g := m.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.left[m.rank] = true
	g.kv[LeftKey(m.rank)] = []byte(fmt.Sprintf("rank %d closed its store", m.rank))
	for seq, cl := range g.colls {
		if cl.fail == nil && !cl.arrived[m.rank] {
			cl.fail = &Error{Err: ErrRankLeft, Ranks: []int{m.rank}, Size: g.size,
				Detail: fmt.Sprintf("rank %d closed its store before entering %s", m.rank, collName(seq, cl.kind, cl.key))}
		}
	}
	g.notifyLocked()
	return nil
}
