package ibv

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/rdmago/rdmago/verbs"
)

// ProviderName is the name the provider registers under.
const ProviderName = "ibv"

// Options select the port and the source GID on the device that
// verbs.DeviceOptions.Name names. The zero value picks the first active port
// and finds its RoCE v2 GID (or, on InfiniBand, its port GID) by querying the
// GID table.
type Options struct {
	// Port is the 1-based physical port. Zero picks the first active port.
	Port int
	// GID selects the source GID: AutoGID (the zero value) or GIDIndex(n).
	GID GIDSelector
}

// GIDSelector says how the source GID is chosen. The zero value is AutoGID.
type GIDSelector struct {
	index int
	set   bool
}

// AutoGID picks the GID by querying the port's GID table: on Ethernet (RoCE)
// the RoCE v2 entry whose GID maps an IPv4 address, else a global IPv6 RoCE
// v2 entry, else any RoCE v2 entry; on InfiniBand the lowest IB entry. It never
// assumes an index.
var AutoGID = GIDSelector{}

// GIDIndex selects GID table entry n of the port (ibv_rc_pingpong -g n).
func GIDIndex(n int) GIDSelector { return GIDSelector{index: n, set: true} }

// Index returns the explicit index and true, or 0 and false for AutoGID.
func (g GIDSelector) Index() (int, bool) { return g.index, g.set }

func (g GIDSelector) String() string {
	if !g.set {
		return "auto"
	}
	return strconv.Itoa(g.index)
}

// Provider is the "ibv" verbs.Provider. The zero value (registered in init)
// uses the zero Options; a Provider with other Options can be passed where a
// verbs.Provider is wanted, or use Open directly.
type Provider struct {
	Options Options
}

func init() { verbs.Register(Provider{}) }

// Name returns "ibv".
func (Provider) Name() string { return ProviderName }

// Open opens the device opts.Name names (see Open).
func (p Provider) Open(ctx context.Context, opts verbs.DeviceOptions) (verbs.Device, error) {
	return Open(ctx, opts, p.Options)
}

// Open opens an RDMA device through libibverbs. opts.Name is "dev",
// "dev:port" or "dev:port:gidindex" (empty: the first device with an active
// port); o's Port and GID, when set, take precedence over the name's. Without
// the rdma build tag, or when no device is present, the error wraps
// verbs.ErrUnavailable.
func Open(ctx context.Context, opts verbs.DeviceOptions, o Options) (verbs.Device, error) {
	sel, err := parseName(opts.Name)
	if err != nil {
		return nil, &verbs.Error{Op: "Open", Provider: ProviderName, Index: -1, Err: err}
	}
	if o.Port < 0 || o.Port > 255 {
		return nil, &verbs.Error{Op: "Open", Provider: ProviderName, Index: -1,
			Err: fmt.Errorf("%w: port %d out of range 1..255", verbs.ErrInvalidArgument, o.Port)}
	}
	if o.Port != 0 {
		sel.port = o.Port
	}
	if i, ok := o.GID.Index(); ok {
		if i < 0 {
			return nil, &verbs.Error{Op: "Open", Provider: ProviderName, Index: -1,
				Err: fmt.Errorf("%w: negative GID index %d", verbs.ErrInvalidArgument, i)}
		}
		sel.gid = o.GID
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return open(ctx, sel, opts)
}

// selection is what Open resolved from the name and Options.
type selection struct {
	name string // device name; "" = first with an active port
	port int    // 0 = first active
	gid  GIDSelector
}

// parseName splits "dev[:port[:gid]]", NCCL_IB_HCA style.
func parseName(s string) (selection, error) {
	var sel selection
	parts := strings.Split(s, ":")
	if len(parts) > 3 {
		return sel, fmt.Errorf("%w: device name %q: want dev, dev:port or dev:port:gidindex", verbs.ErrInvalidArgument, s)
	}
	sel.name = parts[0]
	if len(parts) > 1 {
		p, err := strconv.Atoi(parts[1])
		if err != nil || p < 1 || p > 255 {
			return sel, fmt.Errorf("%w: device name %q: port %q is not 1..255", verbs.ErrInvalidArgument, s, parts[1])
		}
		sel.port = p
	}
	if len(parts) > 2 {
		g, err := strconv.Atoi(parts[2])
		if err != nil || g < 0 {
			return sel, fmt.Errorf("%w: device name %q: GID index %q is not a non-negative integer", verbs.ErrInvalidArgument, s, parts[2])
		}
		sel.gid = GIDIndex(g)
	}
	if sel.name == "" && len(parts) > 1 {
		return sel, fmt.Errorf("%w: device name %q: a port or GID index needs a device name", verbs.ErrInvalidArgument, s)
	}
	return sel, nil
}
