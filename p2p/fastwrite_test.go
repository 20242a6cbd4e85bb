package p2p_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// mappedWindow makes a 64-byte AllocWindow and, on rank 0, writes pattern
// 1 at rank 1's offset 0 with IwriteNow, which maps rank 1's part: a copy,
// with neither a request nor an error.
func mappedWindow(ctx context.Context, ep *p2p.Endpoint) (*p2p.Window, error) {
	w, err := ep.AllocWindow(ctx, 64)
	if err != nil || ep.Rank() != 0 {
		return w, err
	}
	if r, err := w.IwriteNow(1, 0, pattern(8, 1)); err != nil || r != nil {
		return nil, fmt.Errorf("the first IwriteNow: request %v, error %v; want neither", r, err)
	}
	return w, nil
}

// TestSmallDirectWriteTakesNoLock: once a rank has written into a peer's
// window memory that it maps (shm, AllocWindow), a small IwriteNow is a
// copy that does not wait for the endpoint's lock (held here by the test,
// as another goroutine's operation would hold it), and lands; while a
// window operation is pending it is not a copy (it would overtake that
// operation) but takes the queue pair.
func TestSmallDirectWriteTakesNoLock(t *testing.T) {
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "shm"}, func(ctx context.Context, ep *p2p.Endpoint) error {
		w, err := mappedWindow(ctx, ep)
		if err != nil {
			return err
		}
		if ep.Rank() == 1 {
			if _, err := ep.Recv(ctx, 0, 1, nil); err != nil {
				return err
			}
			if got, want := w.Bytes()[:24], append(pattern(8, 1), append(pattern(8, 2), pattern(8, 3)...)...); !bytes.Equal(got, want) {
				return fmt.Errorf("rank 1's window holds %v, want %v", got, want)
			}
			return w.Close(ctx)
		}
		release := ep.HoldLock()
		done := make(chan error, 1)
		go func() {
			r, err := w.IwriteNow(1, 8, pattern(8, 2))
			if err == nil && r != nil {
				err = errors.New("a request for a copy into mapped memory")
			}
			done <- err
		}()
		wait, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		select {
		case err = <-done:
			release()
		case <-wait.Done():
			release()
			<-done
			return errors.New("IwriteNow into mapped memory waited for the endpoint's lock")
		}
		if err != nil {
			return err
		}
		hold := ep.HoldWindowOps()
		r, err := w.IwriteNow(1, 16, pattern(8, 3))
		hold()
		if err != nil {
			return err
		}
		if r == nil {
			return errors.New("IwriteNow copied past a pending window operation (no request)")
		}
		if _, err := r.Wait(ctx); err != nil {
			return err
		}
		if err := ep.Send(ctx, 1, 1, nil); err != nil {
			return err
		}
		return w.Close(ctx)
	})
}

// TestDirectWriteToDepartedPeerFails: once a peer has closed its endpoint
// and this rank has heard so, a small IwriteNow into its mapped window is
// no silent copy: it fails, or gives a request that fails, naming the
// peer.
func TestDirectWriteToDepartedPeerFails(t *testing.T) {
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "shm"}, func(ctx context.Context, ep *p2p.Endpoint) error {
		w, err := mappedWindow(ctx, ep)
		if err != nil {
			return err
		}
		if ep.Rank() == 1 {
			if _, err := ep.Recv(ctx, 0, 1, nil); err != nil {
				return err
			}
			return ep.Close()
		}
		if err := ep.Send(ctx, 1, 1, nil); err != nil {
			return err
		}
		// Rank 1's departure reaches this rank as the failure of a
		// receive that only it could match.
		var closed *p2p.PeerClosedError
		if _, err := ep.Recv(ctx, 1, 2, nil); !errors.As(err, &closed) {
			return fmt.Errorf("a receive from the departed rank 1: %v, want a PeerClosedError", err)
		}
		r, err := w.IwriteNow(1, 8, pattern(8, 2))
		if err == nil && r != nil {
			_, err = r.Wait(ctx)
		}
		if err == nil {
			return errors.New("IwriteNow into a departed peer's window succeeded")
		}
		var gone *p2p.PeerClosedError
		if !errors.As(err, &gone) || gone.Rank != 1 {
			return fmt.Errorf("IwriteNow into departed rank 1's window: %v, want a PeerClosedError naming rank 1", err)
		}
		return nil
	})
}
