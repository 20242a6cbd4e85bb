package comm

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestFlushAfterDirectPutsTakesNoLock: over shm a Put into an AllocWin
// window is a copy into memory this process maps and leaves nothing
// pending, so the Flush after it returns without the window's lock (held
// here by the test, as a concurrent Put or Flush would), and the data is
// in the target's window.
func TestFlushAfterDirectPutsTakesNoLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	comms := initPair(t, "shm")
	wins := make([]*Win[byte], 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { wins[r], errs[r] = AllocWin[byte](ctx, comms[r], 16) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: AllocWin: %v", r, err)
		}
	}
	defer func() {
		for r := range 2 {
			wg.Go(func() { errs[r] = wins[r].Close(ctx) })
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Errorf("rank %d: Close: %v", r, err)
			}
		}
	}()
	src := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	w := wins[0]
	w.mu.Lock()
	done := make(chan error, 1)
	go func() {
		if err := w.Put(1, 4, src); err != nil {
			done <- err
			return
		}
		done <- w.Flush(ctx)
	}()
	select {
	case err := <-done:
		w.mu.Unlock()
		if err != nil {
			t.Fatalf("Put+Flush: %v", err)
		}
	case <-ctx.Done():
		w.mu.Unlock()
		t.Fatal("Put+Flush waited for the window's lock")
	}
	got := wins[1].Local()[4:12]
	for i := range src {
		if got[i] != src[i] {
			t.Fatalf("rank 1's window holds %v at 4, want %v", got, src)
		}
	}
}
