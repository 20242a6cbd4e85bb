package launchers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/bootstrap/pmi"
)

// ConnectOptions are what the rendezvous needs beyond the launcher's
// environment: what every rank must agree on, and logging.
type ConnectOptions struct {
	// Version and Config must be equal on every rank (bootstrap's
	// ClientOptions.Version and Config); under PMI they are compared with
	// rank 0's.
	Version, Config string
	// Hostname overrides the host name a rank reports and, with HostID, the
	// host it counts as on (bootstrap only).
	Hostname string
	// HostID overrides the host identity (bootstrap.ClientOptions.HostID).
	HostID string
	Logger *slog.Logger
	// Stderr receives the one line a rank writes under PMI when it cannot
	// join (nil: os.Stderr), just before it asks the launcher to end the
	// job: Hydra and srun would otherwise wait for the other ranks, stuck
	// in a Fence, forever, and PMI abort carries no message.
	Stderr io.Writer
}

// Rendezvous is a joined job: the store the ranks exchange addresses
// through, and the job secret the transports authenticate with.
type Rendezvous struct {
	// Store is a *pmi.Client under PMI, else a *bootstrap.Client (with
	// AdvertiseAddr and SpansHosts).
	Store bootstrap.Store
	// Token is the job secret: RDMARUN_TOKEN's, or under PMI the one rank
	// 0 made and shared.
	Token []byte
	// Closer leaves the rendezvous (PMI finalize, or the bootstrap
	// client's Close, which on rank 0 also stops the server).
	io.Closer
}

// tokenKey is where rank 0 publishes the secret and its configuration
// under PMI. The PMI key-value space is the launcher's own channel, only
// the job's ranks read it.
const tokenKey = "launchers/job"

// Connect joins the job: under PMI it opens the launcher's PMI service and
// shares a fresh job secret from rank 0 through it (one Fence); otherwise
// rank 0 serves the authenticated rendezvous at Addr and every rank joins
// it. It is a collective. On success l.Rank and l.Size are the final ones
// (Hydra's -pmi-port mode learns them here).
func (l *Launch) Connect(ctx context.Context, o ConnectOptions) (*Rendezvous, error) {
	if l.PMI != nil {
		return l.connectPMI(ctx, o)
	}
	jo := bootstrap.JoinOptions{
		ClientOptions: bootstrap.ClientOptions{Addr: l.Addr, Token: l.Token, Rank: l.Rank, Size: l.Size,
			Version: o.Version, Config: o.Config, Hostname: o.Hostname, HostID: o.HostID, Logger: o.Logger},
		Serve: l.Serve,
	}
	if l.Serve {
		jo.Listen = listenAddr(l.Addr)
	}
	c, err := bootstrap.Join(ctx, jo)
	if err != nil {
		return nil, fmt.Errorf("%s: rendezvous at %s: %w", l.Via, l.Addr, err)
	}
	return &Rendezvous{Store: c, Token: l.Token, Closer: c}, nil
}

func (l *Launch) connectPMI(ctx context.Context, o ConnectOptions) (rv *Rendezvous, err error) {
	po := *l.PMI
	po.Logger = o.Logger
	c, err := pmi.Open(ctx, po)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", l.Via, err)
	}
	l.Rank, l.Size = c.Rank(), c.Size()
	defer func() {
		if err == nil {
			return
		}
		// The other ranks wait in a Fence for this one: end the job.
		w := o.Stderr
		if w == nil {
			w = os.Stderr
		}
		fmt.Fprintf(w, "rdmago: rank %d of %d: %v; asking %s to end the job\n", c.Rank(), c.Size(), err, l.Via)
		// Hydra's proxy kills the job as soon as it reads the abort and
		// drops what it has not yet forwarded from the rank's stderr
		// pipe: give it a moment to forward the line first.
		time.Sleep(200 * time.Millisecond)
		actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.Abort(actx, 1, err.Error())
		cancel()
		c.Close()
	}()
	cfg := []byte(o.Version + "\x00" + o.Config)
	if len(cfg)+32 > bootstrap.MaxValueLen {
		return nil, &bootstrap.Error{Op: "join", Err: bootstrap.ErrInvalid, Detail: "Version and Config too long"}
	}
	var token []byte
	if c.Rank() == 0 {
		if token, err = bootstrap.NewToken(); err != nil {
			return nil, err
		}
		if err = c.Put(ctx, tokenKey, append(append([]byte{}, token...), cfg...)); err != nil {
			return nil, fmt.Errorf("%s: publishing the job secret: %w", l.Via, err)
		}
	}
	if err = c.Fence(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", l.Via, err)
	}
	if c.Rank() != 0 {
		v, err := c.Get(ctx, tokenKey)
		if err != nil {
			return nil, fmt.Errorf("%s: the job secret from rank 0: %w", l.Via, err)
		}
		if len(v) < 32 {
			return nil, &bootstrap.Error{Op: "join", Err: bootstrap.ErrProtocol, Detail: fmt.Sprintf("rank 0 published %d bytes as the job secret", len(v))}
		}
		token = v[:32]
		if !bytes.Equal(v[32:], cfg) {
			return nil, &bootstrap.Error{Op: "join", Err: bootstrap.ErrMismatch, Ranks: []int{0, c.Rank()}, Size: c.Size(),
				Detail: fmt.Sprintf("rank %d runs %q, rank 0 runs %q (version and transport configuration must agree)",
					c.Rank(), bytes.ReplaceAll(cfg, []byte{0}, []byte(" ")), bytes.ReplaceAll(v[32:], []byte{0}, []byte(" ")))}
		}
	}
	return &Rendezvous{Store: c, Token: token, Closer: c}, nil
}

// listenAddr is where rank 0 listens for an agreed address: the address
// itself when it names this host, else every interface on its port (a
// Kubernetes service name or a NAT address reaches rank 0 without being
// one of its own addresses).
//
// It finds out by binding the host with port 0, never the agreed port: a
// listener there, however brief, takes the connections of the ranks that
// are already dialing rank 0 (they start at once and retry until it
// listens), and closing it resets them; their handshake fails and the job
// loses them, the others waiting out their timeout.
func listenAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err == nil {
		ln.Close()
		return addr
	}
	if errors.Is(err, syscall.EADDRNOTAVAIL) || isNoSuchHost(err) {
		return net.JoinHostPort("", port)
	}
	return addr // let Join report the real problem (port in use, ...)
}

func isNoSuchHost(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de)
}
