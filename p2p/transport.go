package p2p

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"math/bits"
	"strings"

	"github.com/rdmago/rdmago/internal/hostid"
	"github.com/rdmago/rdmago/verbs"
	_ "github.com/rdmago/rdmago/verbs/shm"
	_ "github.com/rdmago/rdmago/verbs/tcp"
)

// Transport choice.
//
// Policy comes from what providers say of themselves (verbs.Traits,
// Provider.CanConnect), never from their names: a new provider is its own
// package plus a registration. Each rank publishes a record about itself
// under "p2p/<Name>/host/<rank>": its host identity (internal/hostid: the
// kernel's boot id plus the network namespace, the notion bootstrap and
// comm share), its process, the hardware providers whose device opens here
// (probed once at start-up), and its CPU affinity for the wait policy (see
// hostInfo.encode). For each peer the registered providers are asked in
// preference order (verbs.Preferred) and the first that can connect the
// two records carries the pair: today shm on one host, ibv across hosts
// when both ranks have a device, tcp otherwise. CanConnect is symmetric,
// so both ends of a pair agree. With Options.Provider naming a provider,
// every peer uses it, and a pair it cannot connect fails New naming both
// ranks. The choice per peer is visible with Endpoint.Transport.

const hostKey = "host/"

// processID tells ranks of one process from those of another (the loop
// provider connects only the former).
var processID = rand.Text()

func (ep *Endpoint) chooseProviders(ctx context.Context, rv Rendezvous) error {
	ep.provider = make([]verbs.Provider, ep.size)
	var forced verbs.Provider
	if name := ep.opts.Provider; name != "" && name != "auto" {
		p, err := verbs.Lookup(name)
		if err != nil {
			return err
		}
		forced = p
		for r := range ep.provider {
			ep.provider[r] = p
		}
	}
	mine := cpuMask()
	ep.kernelCPUs = onesIn(mine)
	ep.localRanks, ep.kernelRanks = 1, 1
	if ep.size == 1 {
		if forced == nil {
			// A lone rank still needs a device for windows: the first
			// provider that connects ranks it knows nothing about.
			p := pickProvider(verbs.Preferred(), hostInfo{}, hostInfo{})
			if p == nil {
				return fmt.Errorf("%w: no registered provider works without knowing the ranks (registered: %v)", verbs.ErrUnavailable, verbs.Providers())
			}
			ep.provider[ep.rank] = p
		}
		return nil
	}
	// Even with a forced transport, the ranks learn which of them share
	// this host and its CPUs: the wait policy depends on it.
	id, err := hostid.ID()
	if err != nil {
		id = ""
	}
	me := hostInfo{PeerInfo: verbs.PeerInfo{Host: id, Process: processID}, mask: mine}
	switch {
	case forced == nil:
		if me.Devices, err = ep.probeDevices(ctx); err != nil {
			return err
		}
	case forced.Traits().Hardware:
		// The forced provider's device is opened in setup, or New fails
		// there with the reason.
		me.Devices = []string{forced.Name()}
	}
	prefix := "p2p/" + ep.opts.Name + "/" + hostKey
	if err := rv.Put(ctx, fmt.Sprintf("%s%d", prefix, ep.rank), me.encode()); err != nil {
		return err
	}
	// A PMI key-value space publishes puts only at a fence.
	if err := rv.Fence(ctx); err != nil {
		return err
	}
	union := mine
	prefs := verbs.Preferred()
	load := hostLoad{}
	load.add(me)
	for r := range ep.provider {
		if r == ep.rank {
			continue
		}
		v, err := rv.Get(ctx, fmt.Sprintf("%s%d", prefix, r))
		if err != nil {
			return err
		}
		peer := decodeHostInfo(v)
		load.add(peer)
		switch {
		case forced == nil:
			if ep.provider[r] = pickProvider(prefs, me, peer); ep.provider[r] == nil {
				return fmt.Errorf("%w: no registered provider connects rank %d (%v) with rank %d (%v) (registered: %v)",
					verbs.ErrUnavailable, ep.rank, me.PeerInfo, r, peer.PeerInfo, verbs.Providers())
			}
		case !forced.CanConnect(me.PeerInfo, peer.PeerInfo):
			return fmt.Errorf("%w: transport %q was chosen for every rank but cannot connect rank %d (%v) with rank %d (%v)",
				verbs.ErrUnavailable, forced.Name(), ep.rank, me.PeerInfo, r, peer.PeerInfo)
		}
		// A provider that shares memory connects only ranks of this host.
		local := me.SameHost(peer.PeerInfo) || ep.provider[r].Traits().SharesMemory
		if local {
			ep.localRanks++
		}
		// Ranks in other network namespaces of this machine are other
		// hosts, but share its CPUs: a rank waiting for one may hold the
		// CPU it needs (Crowded).
		if local || hostid.SameKernel(me.Host, peer.Host) {
			union = orMask(union, peer.mask)
			ep.kernelRanks++
		}
	}
	ep.kernelCPUs = onesIn(union)
	ep.crowding = load.crowding()
	return nil
}

// hostLoad counts, for every host of the job, its ranks and the union of
// their CPU masks (a rank of unknown host is a host of its own).
type hostLoad map[string]*hostCount

type hostCount struct {
	ranks int
	mask  []byte
	blind bool // a rank published no mask: its host's CPUs are unknown
}

func (l hostLoad) add(h hostInfo) {
	key := h.Host
	if key == "" {
		key = fmt.Sprintf("\x00%d", len(l))
	}
	e := l[key]
	if e == nil {
		e = &hostCount{}
		l[key] = e
	}
	e.ranks++
	e.mask = orMask(e.mask, h.mask)
	e.blind = e.blind || len(h.mask) == 0
}

// crowding is the largest ratio of ranks to CPUs over the hosts whose
// CPUs are known (Endpoint.Crowding); 0 when there is none.
func (l hostLoad) crowding() float64 {
	worst := 0.0
	for _, e := range l {
		if cpus := onesIn(e.mask); !e.blind && cpus > 0 {
			worst = max(worst, float64(e.ranks)/float64(cpus))
		}
	}
	return worst
}

// hostInfo is what a rank publishes about itself for the transport choice.
type hostInfo struct {
	verbs.PeerInfo
	mask []byte // CPU affinity bitmap (see cpuMask)
}

// The host record is the host identity, the process identity and the
// comma-separated hardware providers with a device, each ended by a NUL,
// then the rank's CPU affinity bitmap. The union of the bitmaps of the
// ranks on a host tells the wait policy how many CPUs those ranks share:
// each rank alone may see only its own core (rdmarun --bind-to core),
// which says nothing about whether the ranks outnumber the cores.
func (h hostInfo) encode() []byte {
	b := append([]byte(h.Host), 0)
	b = append(append(b, h.Process...), 0)
	b = append(append(b, strings.Join(h.Devices, ",")...), 0)
	return append(b, h.mask...)
}

// decodeHostInfo reads a record; missing fields are unknown.
func decodeHostInfo(v []byte) hostInfo {
	var fields [3]string
	for i := range fields {
		j := bytes.IndexByte(v, 0)
		if j < 0 {
			fields[i], v = string(v), nil
			break
		}
		fields[i], v = string(v[:j]), v[j+1:]
	}
	h := hostInfo{PeerInfo: verbs.PeerInfo{Host: fields[0], Process: fields[1]}}
	if fields[2] != "" {
		h.Devices = strings.Split(fields[2], ",")
	}
	if len(v) > 0 {
		h.mask = v
	}
	return h
}

// pickProvider is the automatic choice for the pair (me, peer): the first
// of prefs (verbs.Preferred) that can connect them; nil when none can.
func pickProvider(prefs []verbs.Provider, me, peer hostInfo) verbs.Provider {
	for _, p := range prefs {
		if p.CanConnect(me.PeerInfo, peer.PeerInfo) {
			return p
		}
	}
	return nil
}

// probeDevices lists the hardware providers whose device opens here. The
// probe's device is closed; the endpoint opens its own if a peer is
// reached through the provider. A device the user selected
// (Options.IBDevices) that does not open is an error, not a reason to use
// another provider.
func (ep *Endpoint) probeDevices(ctx context.Context) ([]string, error) {
	var have []string
	for _, p := range verbs.Preferred() {
		if !p.Traits().Hardware {
			continue
		}
		d, err := ep.openDevice(ctx, p, ep.deviceOptions(p))
		if err != nil {
			if ep.opts.IBDevices != "" {
				return nil, fmt.Errorf("opening the %s device selected by %q: %w", p.Name(), ep.opts.IBDevices, err)
			}
			continue
		}
		_ = d.Close()
		have = append(have, p.Name())
	}
	return have, nil
}

func orMask(a, b []byte) []byte {
	out := make([]byte, max(len(a), len(b)))
	copy(out, a)
	for i, x := range b {
		out[i] |= x
	}
	return out
}

func onesIn(mask []byte) int {
	n := 0
	for _, x := range mask {
		n += bits.OnesCount8(x)
	}
	return n
}

// deviceOptions are the options p's devices open with: the endpoint's,
// with the hardware device selection for hardware providers.
func (ep *Endpoint) deviceOptions(p verbs.Provider) verbs.DeviceOptions {
	o := ep.opts.Device
	if p.Traits().Hardware && ep.opts.IBDevices != "" {
		o.Name = ep.opts.IBDevices
	}
	return o
}

func (ep *Endpoint) openDevice(ctx context.Context, p verbs.Provider, o verbs.DeviceOptions) (verbs.Device, error) {
	if ep.opts.OpenDevice != nil {
		return ep.opts.OpenDevice(ctx, p.Name(), o)
	}
	return p.Open(ctx, o)
}
