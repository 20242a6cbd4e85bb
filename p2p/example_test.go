package p2p_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

func Example() {
	// Two ranks as goroutines over the in-process loop provider.
	_ = p2ptest.RunErr(2, p2ptest.Options{Provider: "loop", Timeout: 30 * time.Second}, func(ctx context.Context, ep *p2p.Endpoint) error {
		if ep.Rank() == 0 {
			return ep.Send(ctx, 1, 42, []byte("hello"))
		}
		buf := make([]byte, 64)
		st, err := ep.Recv(ctx, p2p.AnySource, p2p.AnyTag, buf)
		if err != nil {
			return err
		}
		fmt.Printf("%q: %d bytes from rank %d, tag %d\n", buf[:st.Count], st.Count, st.Source, st.Tag)
		return nil
	})
	// Output: "hello": 5 bytes from rank 0, tag 42
}
