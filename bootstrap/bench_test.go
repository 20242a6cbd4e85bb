package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// BenchmarkAllgather measures one allgather of a 512-byte value (a QP
// address) over all ranks; impl=memory is the in-process baseline.
func BenchmarkAllgather(b *testing.B) {
	for _, n := range []int{8, 64} {
		for _, impl := range []string{"memory", "tcp"} {
			b.Run(fmt.Sprintf("impl=%s/ranks=%d", impl, n), func(b *testing.B) {
				ctx := context.Background()
				var ss []Store
				if impl == "memory" {
					ms, err := NewMemory(n)
					if err != nil {
						b.Fatal(err)
					}
					for _, m := range ms {
						ss = append(ss, m)
					}
				} else {
					srv, err := NewServer(ServerOptions{Token: testToken, Size: n})
					if err != nil {
						b.Fatal(err)
					}
					defer srv.Close()
					cs := make([]*Client, n)
					errs := each(n, func(r int) (err error) {
						cs[r], err = Dial(ctx, ClientOptions{Addr: srv.Addr(), Token: testToken, Rank: r, Size: n})
						return err
					})
					if err := errors.Join(errs...); err != nil {
						b.Fatal(err)
					}
					for _, c := range cs {
						defer c.Close()
						ss = append(ss, c)
					}
				}
				val := make([]byte, 512)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					key := fmt.Sprint("k", i)
					i++
					if err := errors.Join(each(n, func(r int) error {
						_, err := Allgather(ctx, ss[r], key, val)
						return err
					})...); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkJoin measures a whole job joining a fresh server over loopback
// (handshake, join, agreement, welcome).
func BenchmarkJoin(b *testing.B) {
	for _, n := range []int{8, 64} {
		b.Run(fmt.Sprintf("ranks=%d", n), func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				srv, err := NewServer(ServerOptions{Token: testToken, Size: n})
				if err != nil {
					b.Fatal(err)
				}
				cs := make([]*Client, n)
				errs := each(n, func(r int) (err error) {
					cs[r], err = Dial(ctx, ClientOptions{Addr: srv.Addr(), Token: testToken, Rank: r, Size: n})
					return err
				})
				if err := errors.Join(errs...); err != nil {
					b.Fatal(err)
				}
				for _, c := range cs {
					c.Close()
				}
				srv.Close()
			}
		})
	}
}
