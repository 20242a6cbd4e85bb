package ibv

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

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

// Traits: ibv is preferred to tcp between hosts that both have a device.
func (Provider) Traits() verbs.Traits {
	return verbs.Traits{
		Preference: 20,
		Hardware:   true,
		EagerSize:  8 << 10,
		Wait:       verbs.WaitHint{Spin: 20 * time.Microsecond, SpinShared: 20 * time.Microsecond, Yield: 200 * time.Microsecond},
	}
}

// CanConnect: ibv connects two ranks that each opened a device.
func (Provider) CanConnect(local, remote verbs.PeerInfo) bool {
	return local.HasDevice(ProviderName) && remote.HasDevice(ProviderName)
}

// Open opens the device opts.Name names (see Open).
func (p Provider) Open(ctx context.Context, opts verbs.DeviceOptions) (verbs.Device, error) {
	return Open(ctx, opts, p.Options)
}

// Open opens an RDMA device through libibverbs. opts.Name selects it, in
// NCCL_IB_HCA's syntax (see ParseDevices): "dev", "dev:port",
// "dev:port:gidindex", a comma-separated list of those, "^" to exclude, "="
// for exact names; empty means every device. The first selected device with
// an active port opens. o's Port and GID, when set, take precedence over the
// name's. Without the rdma build tag, or when no device is present or none
// matches (the error lists those present), the error wraps
// verbs.ErrUnavailable.
func Open(ctx context.Context, opts verbs.DeviceOptions, o Options) (verbs.Device, error) {
	spec, err := ParseDevices(opts.Name)
	if err != nil {
		return nil, &verbs.Error{Op: "Open", Provider: ProviderName, Index: -1, Err: err}
	}
	if o.Port < 0 || o.Port > 255 {
		return nil, &verbs.Error{Op: "Open", Provider: ProviderName, Index: -1,
			Err: fmt.Errorf("%w: port %d out of range 1..255", verbs.ErrInvalidArgument, o.Port)}
	}
	if i, ok := o.GID.Index(); ok && i < 0 {
		return nil, &verbs.Error{Op: "Open", Provider: ProviderName, Index: -1,
			Err: fmt.Errorf("%w: negative GID index %d", verbs.ErrInvalidArgument, i)}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return open(ctx, selector{spec: spec, opts: o}, opts)
}

// DeviceSpec is a parsed device selection (ParseDevices).
type DeviceSpec struct {
	// Exclude selects every device except those the entries match.
	Exclude bool
	// Exact matches entry names exactly; otherwise an entry's name is a
	// prefix ("mlx5" matches mlx5_0 and mlx5_1), as in NCCL.
	Exact bool
	// Entries in the order given; empty with Exclude false means every device.
	Entries []DeviceEntry
}

// DeviceEntry is one device of a selection, optionally with its port and
// source GID index.
type DeviceEntry struct {
	Name string
	Port int         // 0: the first active port
	GID  GIDSelector // AutoGID unless given
}

// ParseDevices parses a device selection as NCCL_IB_HCA writes it: a
// comma-separated list of "dev", "dev:port" or "dev:port:gidindex" entries,
// optionally preceded by "^" (use every device except these) and then "="
// (names are exact, not prefixes). Examples: "mlx5_0:1,mlx5_1", "=rxe1",
// "^mlx5_2", "^=mlx5_1". Excluded entries name whole devices (no port). The
// empty string selects every device. Errors wrap verbs.ErrInvalidArgument
// and quote the input.
func ParseDevices(s string) (DeviceSpec, error) {
	var spec DeviceSpec
	if s == "" {
		return spec, nil
	}
	bad := func(format string, a ...any) (DeviceSpec, error) {
		return DeviceSpec{}, fmt.Errorf("%w: device selection %q: %s", verbs.ErrInvalidArgument, s,
			fmt.Sprintf(format, a...))
	}
	rest := s
	if r, ok := strings.CutPrefix(rest, "^"); ok {
		spec.Exclude, rest = true, r
	}
	if r, ok := strings.CutPrefix(rest, "="); ok {
		spec.Exact, rest = true, r
	}
	if rest == "" {
		return bad("no device named")
	}
	for _, item := range strings.Split(rest, ",") {
		parts := strings.Split(item, ":")
		e := DeviceEntry{Name: parts[0]}
		switch {
		case e.Name == "":
			return bad("empty device name in %q (want dev, dev:port or dev:port:gidindex, comma-separated)", item)
		case len(parts) > 3:
			return bad("%q: want dev, dev:port or dev:port:gidindex", item)
		case strings.ContainsAny(e.Name, "^="):
			return bad("%q: \"^\" and \"=\" go before the list, in that order", item)
		case spec.Exclude && len(parts) > 1:
			return bad("%q: an excluded entry names a whole device, without a port", item)
		}
		if len(parts) > 1 {
			p, err := strconv.Atoi(parts[1])
			if err != nil || p < 1 || p > 255 {
				return bad("port %q of %s is not 1..255", parts[1], e.Name)
			}
			e.Port = p
		}
		if len(parts) > 2 {
			g, err := strconv.Atoi(parts[2])
			if err != nil || g < 0 {
				return bad("GID index %q of %s is not a non-negative integer", parts[2], e.Name)
			}
			e.GID = GIDIndex(g)
		}
		spec.Entries = append(spec.Entries, e)
	}
	return spec, nil
}

func (s DeviceSpec) matches(e DeviceEntry, dev string) bool {
	if s.Exact {
		return dev == e.Name
	}
	return strings.HasPrefix(dev, e.Name)
}

// Select returns the devices of present (in the order libibverbs lists
// them) that s selects, in the order to try them: the entries' order, then
// present's. It fails, wrapping verbs.ErrUnavailable and naming the
// devices present, when there are none or none is selected.
func (s DeviceSpec) Select(present []string) ([]DeviceEntry, error) {
	if len(present) == 0 {
		return nil, fmt.Errorf("%w: no RDMA devices (ibv_get_device_list found none; a NIC with its rdma-core provider, or Soft-RoCE, is needed)", verbs.ErrUnavailable)
	}
	var out []DeviceEntry
	if s.Exclude || len(s.Entries) == 0 {
		for _, dev := range present {
			if !slices.ContainsFunc(s.Entries, func(e DeviceEntry) bool { return s.matches(e, dev) }) {
				out = append(out, DeviceEntry{Name: dev})
			}
		}
	} else {
		for _, e := range s.Entries {
			for _, dev := range present {
				c := DeviceEntry{Name: dev, Port: e.Port, GID: e.GID}
				if s.matches(e, dev) && !slices.ContainsFunc(out, func(o DeviceEntry) bool { return o.Name == dev && o.Port == e.Port }) {
					out = append(out, c)
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no RDMA device matches %q (have %s)", verbs.ErrUnavailable, s, strings.Join(present, ", "))
	}
	return out, nil
}

// String writes s back in ParseDevices' syntax.
func (s DeviceSpec) String() string {
	var b strings.Builder
	if s.Exclude {
		b.WriteByte('^')
	}
	if s.Exact {
		b.WriteByte('=')
	}
	for i, e := range s.Entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.Name)
		if e.Port != 0 || e.GID.set {
			fmt.Fprintf(&b, ":%d", e.Port)
		}
		if e.GID.set {
			fmt.Fprintf(&b, ":%d", e.GID.index)
		}
	}
	return b.String()
}

// selector is what Open resolved: the selection and the explicit Options.
type selector struct {
	spec DeviceSpec
	opts Options
}

// candidates are the devices to try, in order, with Options' port and GID
// applied over the entries'.
func (s selector) candidates(present []string) ([]DeviceEntry, error) {
	c, err := s.spec.Select(present)
	if err != nil {
		return nil, err
	}
	for i := range c {
		if s.opts.Port != 0 {
			c[i].Port = s.opts.Port
		}
		if _, ok := s.opts.GID.Index(); ok {
			c[i].GID = s.opts.GID
		}
	}
	return c, nil
}
