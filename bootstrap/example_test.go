package bootstrap_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
)

// A launcher serves the rendezvous; four ranks join it and exchange their
// (here made-up) queue-pair addresses.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	token, err := bootstrap.NewToken()
	if err != nil {
		panic(err)
	}
	srv, err := bootstrap.NewServer(bootstrap.ServerOptions{Token: token, Size: 4})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	got := make([][][]byte, 4)
	var wg sync.WaitGroup
	for rank := range 4 {
		wg.Go(func() {
			c, err := bootstrap.Dial(ctx, bootstrap.ClientOptions{
				Addr: srv.Addr(), Token: token, Rank: rank, Size: 4,
				Version: "v0.1.0", Config: "tcp"})
			if err != nil {
				panic(err)
			}
			defer c.Close()
			got[rank], err = bootstrap.Allgather(ctx, c, "qp", fmt.Appendf(nil, "qp-of-%d", rank))
			if err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	fmt.Printf("rank 2 sees %q\n", got[2])
	// Output: rank 2 sees ["qp-of-0" "qp-of-1" "qp-of-2" "qp-of-3"]
}

// A timeout names the ranks that never came.
func ExampleDial_timeout() {
	token := []byte("secret")
	srv, _ := bootstrap.NewServer(bootstrap.ServerOptions{Token: token, Size: 3})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := bootstrap.Dial(ctx, bootstrap.ClientOptions{Addr: srv.Addr(), Token: token, Rank: 0, Size: 3})
	fmt.Println(err)
	// Output: bootstrap: join: after 1s, ranks 1 and 2 of 3 have not joined (context deadline exceeded)
}
