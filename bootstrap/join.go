package bootstrap

import (
	"context"
	"net"
	"time"
)

// JoinOptions configure Join: the client options plus whether this rank
// serves the rendezvous itself.
type JoinOptions struct {
	ClientOptions
	// Serve makes this rank run the server (normally rank 0, when no
	// launcher runs one): it listens on Listen, or on Addr when Listen is
	// empty, and then joins through it like every other rank.
	Serve bool
	// Listen overrides where the serving rank listens (":29500" to accept
	// on every interface while others dial "host0:29500").
	Listen string
	// Linger bounds how long the serving rank's Close waits for the other
	// ranks to leave before it closes the server. Zero means 10 s.
	Linger time.Duration
}

// Join is Dial for jobs without a launcher: ranks agree on an address in
// advance (torchrun-style MASTER_ADDR:MASTER_PORT), one rank serves the
// rendezvous there and every rank, the server's included, joins it. Ranks
// that start before the server keep retrying until ctx ends.
func Join(ctx context.Context, opts JoinOptions) (*Client, error) {
	if !opts.Serve {
		return Dial(ctx, opts.ClientOptions)
	}
	if err := opts.ClientOptions.check(); err != nil {
		return nil, err
	}
	listen := opts.Listen
	if listen == "" {
		listen = opts.Addr
	}
	srv, err := NewServer(ServerOptions{Listen: listen, Token: opts.Token, Size: opts.Size, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	co := opts.ClientOptions
	co.Addr = dialable(srv.ln.Addr())
	c, err := Dial(ctx, co)
	if err != nil {
		srv.Close()
		return nil, err
	}
	c.server = srv
	c.linger = opts.Linger
	if c.linger <= 0 {
		c.linger = 10 * time.Second
	}
	return c, nil
}

// dialable turns a listening address into one this host can dial: an
// unspecified IP (0.0.0.0, ::) becomes loopback.
func dialable(a net.Addr) string {
	t, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	ip := t.IP
	if ip == nil || ip.IsUnspecified() {
		// A wildcard listener (":port", "[::]:port") accepts IPv4 too.
		ip = net.IPv4(127, 0, 0, 1)
	}
	return (&net.TCPAddr{IP: ip, Port: t.Port}).String()
}
