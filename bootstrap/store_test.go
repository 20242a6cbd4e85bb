package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rankStore is what the contract tests need of an implementation.
type rankStore interface {
	Store
	Abort(ctx context.Context, code int, reason string) error
	Close() error
}

// plainStore hides the optional capabilities, so Allgather takes the
// Put/Fence/Get path a PMI store would.
type plainStore struct{ s rankStore }

func (p plainStore) Rank() int                                         { return p.s.Rank() }
func (p plainStore) Size() int                                         { return p.s.Size() }
func (p plainStore) Put(ctx context.Context, k string, v []byte) error { return p.s.Put(ctx, k, v) }
func (p plainStore) Get(ctx context.Context, k string) ([]byte, error) { return p.s.Get(ctx, k) }
func (p plainStore) Fence(ctx context.Context) error                   { return p.s.Fence(ctx) }
func (p plainStore) Abort(ctx context.Context, c int, r string) error {
	return p.s.Abort(ctx, c, r)
}
func (p plainStore) Close() error { return p.s.Close() }

type factory func(t *testing.T, size int) []rankStore

var impls = map[string]factory{
	"memory": func(t *testing.T, size int) []rankStore {
		ms, err := NewMemory(size)
		require.NoError(t, err)
		out := make([]rankStore, size)
		for i, m := range ms {
			out[i] = m
		}
		return out
	},
	"tcp": func(t *testing.T, size int) []rankStore {
		s := newServer(t, size, nil)
		cs := joinAll(t, testCtx(t), s, size)
		out := make([]rankStore, size)
		for i, c := range cs {
			out[i] = c
		}
		return out
	},
}

func init() {
	for _, name := range []string{"memory", "tcp"} {
		f := impls[name]
		impls[name+"/plain"] = func(t *testing.T, size int) []rankStore {
			ss := f(t, size)
			for i, s := range ss {
				ss[i] = plainStore{s}
			}
			return ss
		}
	}
}

func forEachImpl(t *testing.T, f func(t *testing.T, mk factory)) {
	checkLeaks(t)
	for _, name := range []string{"memory", "memory/plain", "tcp", "tcp/plain"} {
		t.Run(name, func(t *testing.T) { f(t, impls[name]) })
	}
}

func TestContractAllgather(t *testing.T) {
	forEachImpl(t, func(t *testing.T, mk factory) {
		for _, size := range []int{1, 2, 5} {
			ss := mk(t, size)
			ctx := testCtx(t)
			errs := each(size, func(r int) error {
				for round := range 3 {
					out, err := Allgather(ctx, ss[r], fmt.Sprint("k", round), fmt.Appendf(nil, "%d/%d", round, r))
					if err != nil {
						return err
					}
					if len(out) != size {
						return fmt.Errorf("%d values", len(out))
					}
					for q, v := range out {
						if string(v) != fmt.Sprintf("%d/%d", round, q) {
							return fmt.Errorf("out[%d]=%q", q, v)
						}
					}
				}
				return Barrier(ctx, ss[r])
			})
			require.NoError(t, errors.Join(errs...))
		}
	})
}

func TestContractPutGet(t *testing.T) {
	forEachImpl(t, func(t *testing.T, mk factory) {
		ss := mk(t, 2)
		ctx := testCtx(t)
		got := make(chan []byte, 1)
		go func() {
			v, err := ss[1].Get(ctx, "late")
			assert.NoError(t, err)
			got <- v
		}()
		awaitBlocked(t, 1, ").Get")
		buf := []byte("value")
		require.NoError(t, ss[0].Put(ctx, "late", buf))
		buf[0] = 'X' // the store kept its own copy
		assert.Equal(t, "value", string(<-got))
		require.NoError(t, ss[0].Put(ctx, "late", []byte("again")))
		v, err := ss[1].Get(ctx, "late")
		require.NoError(t, err)
		assert.Equal(t, "again", string(v))

		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err = ss[0].Get(short, "never")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), `bootstrap: get "never": no rank had put the key after`)
		assert.ErrorIs(t, ss[0].Put(ctx, "", nil), ErrInvalid)
		assert.ErrorIs(t, ss[0].Put(ctx, "k", make([]byte, MaxValueLen+1)), ErrInvalid)
	})
}

func TestContractAdd(t *testing.T) {
	forEachImpl(t, func(t *testing.T, mk factory) {
		ss := mk(t, 4)
		ctx := testCtx(t)
		if _, ok := ss[0].(Adder); !ok {
			t.Skip("no Adder")
		}
		errs := each(4, func(r int) error {
			for range 10 {
				if _, err := ss[r].(Adder).Add(ctx, "n", 1); err != nil {
					return err
				}
			}
			return nil
		})
		require.NoError(t, errors.Join(errs...))
		n, err := ss[0].(Adder).Add(ctx, "n", -40)
		require.NoError(t, err)
		assert.Equal(t, int64(0), n)
	})
}

func TestContractFenceTimeout(t *testing.T) {
	forEachImpl(t, func(t *testing.T, mk factory) {
		ss := mk(t, 4)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		errs := each(4, func(r int) error {
			if r == 1 || r == 3 {
				return nil
			}
			return ss[r].Fence(ctx)
		})
		for _, r := range []int{0, 2} {
			require.ErrorIs(t, errs[r], context.DeadlineExceeded)
			assert.Contains(t, errs[r].Error(), "ranks 1 and 3 of 4 have not arrived")
			var e *Error
			require.ErrorAs(t, errs[r], &e)
			assert.Equal(t, []int{1, 3}, e.Ranks)
		}
	})
}

func TestContractRankLeft(t *testing.T) {
	forEachImpl(t, func(t *testing.T, mk factory) {
		ss := mk(t, 3)
		ctx := testCtx(t)
		res := make(chan error, 1)
		go func() { res <- ss[0].Fence(ctx) }()
		awaitBlocked(t, 1, ").Fence")
		require.NoError(t, ss[2].Close())
		err := <-res
		require.ErrorIs(t, err, ErrRankLeft)
		var e *Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, []int{2}, e.Ranks)
		assert.Contains(t, err.Error(), "rank 2")
		_, err = Allgather(ctx, ss[1], "x", nil)
		require.ErrorIs(t, err, ErrRankLeft)
		require.ErrorIs(t, ss[2].Put(ctx, "k", nil), ErrClosed)
	})
}

func TestContractAbort(t *testing.T) {
	forEachImpl(t, func(t *testing.T, mk factory) {
		ss := mk(t, 2)
		ctx := testCtx(t)
		res := make(chan error, 1)
		go func() { _, err := ss[0].Get(ctx, "never"); res <- err }()
		awaitBlocked(t, 1, ").Get")
		require.NoError(t, ss[1].Abort(ctx, 7, "bad input"))
		err := <-res
		var ae *AbortError
		require.ErrorAs(t, err, &ae)
		assert.Equal(t, AbortInfo{Rank: 1, Code: 7, Reason: "bad input"}, ae.Info)
		require.Eventually(t, func() bool { return errors.Is(ss[0].Fence(ctx), ErrAborted) }, testTimeout, time.Millisecond)
	})
}

func TestContractCollectiveMismatch(t *testing.T) {
	forEachImpl(t, func(t *testing.T, mk factory) {
		ss := mk(t, 2)
		if _, ok := ss[0].(Allgatherer); !ok {
			t.Skip("mismatch detection needs a store-side collective")
		}
		ctx := testCtx(t)
		errs := each(2, func(r int) error {
			_, err := Allgather(ctx, ss[r], fmt.Sprint("key", r), nil)
			return err
		})
		for _, err := range errs {
			require.ErrorIs(t, err, ErrMismatch)
			assert.Contains(t, err.Error(), `allgather "key`)
		}
	})
}

func TestNewMemoryBadSize(t *testing.T) {
	_, err := NewMemory(0)
	require.ErrorIs(t, err, ErrInvalid)
}

func TestContractEndedContextDoesNotCount(t *testing.T) {
	forEachImpl(t, func(t *testing.T, mk factory) {
		ss := mk(t, 2)
		dead, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, ss[0].Fence(dead), context.Canceled)
		_, err := Allgather(dead, ss[1], "x", nil)
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorIs(t, ss[0].Put(dead, "k", nil), context.Canceled)
		_, err = ss[0].Get(dead, "k")
		require.ErrorIs(t, err, context.Canceled)
		// The next collectives still line up.
		ctx := testCtx(t)
		errs := each(2, func(r int) error {
			if err := ss[r].Fence(ctx); err != nil {
				return err
			}
			_, err := Allgather(ctx, ss[r], "y", []byte{byte(r)})
			return err
		})
		require.NoError(t, errors.Join(errs...))
	})
}
