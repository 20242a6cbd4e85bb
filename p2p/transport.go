package p2p

import (
	"bytes"
	"context"
	"fmt"
	"math/bits"
	"slices"

	"github.com/rdmago/rdmago/internal/hostid"
	"github.com/rdmago/rdmago/verbs"
	_ "github.com/rdmago/rdmago/verbs/shm"
	_ "github.com/rdmago/rdmago/verbs/tcp"
)

// Transport choice.
//
// With Options.Provider set, every peer uses that provider. Otherwise
// ("auto"), each rank publishes its same-host identity (internal/hostid:
// the kernel's boot id plus the network namespace, the notion bootstrap and
// comm share) under "p2p/<Name>/host/<rank>", and a peer whose identity
// equals ours is reached over shm; a peer on another host over ibv when both ranks have a
// usable ibv device (the provider is linked in, with the rdma build tag,
// and opens), otherwise over tcp. Both ends of a pair compute the same
// answer from the same two records, so they always agree. A rank that
// cannot compute its identity publishes an empty one and uses no shm. The
// record also carries the rank's CPU affinity, for the wait policy (see
// hostInfo.encode); with shm forced it is exchanged too. The choice per
// peer is visible with Endpoint.Transport.

const hostKey = "host/"

func (ep *Endpoint) chooseProviders(ctx context.Context, rv Rendezvous) error {
	ep.provider = make([]string, ep.size)
	forced := ep.opts.Provider != "" && ep.opts.Provider != "auto"
	if forced {
		for r := range ep.provider {
			ep.provider[r] = ep.opts.Provider
		}
	}
	mine := cpuMask()
	ep.localCPUs = onesIn(mine)
	ep.localRanks = 1
	if !forced {
		ep.provider[ep.rank] = "tcp" // a device for windows, even alone
	}
	if ep.size == 1 {
		return nil
	}
	// Even with a forced transport, the ranks learn which of them share
	// this host and its CPUs: the wait policy depends on it.
	id, err := hostid.ID()
	if err != nil {
		id = ""
	}
	me := hostInfo{id: id, mask: mine}
	if !forced {
		if me.ibv, err = ep.haveIBV(ctx); err != nil {
			return err
		}
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
	for r := range ep.provider {
		if r == ep.rank {
			continue
		}
		v, err := rv.Get(ctx, fmt.Sprintf("%s%d", prefix, r))
		if err != nil {
			return err
		}
		peer := decodeHostInfo(v)
		if !forced {
			ep.provider[r] = pickProvider(me, peer)
		}
		if me.sameHost(peer) || forced && ep.opts.Provider == "shm" {
			union = orMask(union, peer.mask)
			ep.localRanks++
		}
	}
	ep.localCPUs = onesIn(union)
	return nil
}

// hostInfo is what a rank publishes about itself for the transport choice.
type hostInfo struct {
	id   string // hostid.ID: boot id and network namespace; "" if unknown
	ibv  bool   // an ibv device opened here
	mask []byte // CPU affinity bitmap (see cpuMask)
}

// The host record is the host identity, a NUL, a flags byte (bit 0: ibv),
// then the rank's CPU affinity bitmap. The union of the bitmaps of the
// ranks on a host tells the wait policy how many CPUs those ranks share:
// each rank alone may see only its own core (rdmarun --bind-to core),
// which says nothing about whether the ranks outnumber the cores.
func (h hostInfo) encode() []byte {
	flags := byte(0)
	if h.ibv {
		flags |= 1
	}
	return append(append([]byte(h.id), 0, flags), h.mask...)
}

func decodeHostInfo(v []byte) hostInfo {
	i := bytes.IndexByte(v, 0)
	if i < 0 {
		return hostInfo{id: string(v)}
	}
	h := hostInfo{id: string(v[:i])}
	if rest := v[i+1:]; len(rest) > 0 {
		h.ibv = rest[0]&1 != 0
		h.mask = rest[1:]
	}
	return h
}

// sameHost reports whether two records name one host (an unknown identity
// never does).
func (h hostInfo) sameHost(o hostInfo) bool { return hostid.Same(h.id, o.id) }

// pickProvider is the automatic choice for the pair (me, peer): shm on one
// host, ibv across hosts when both have it, tcp otherwise.
func pickProvider(me, peer hostInfo) string {
	switch {
	case me.sameHost(peer):
		return "shm"
	case me.ibv && peer.ibv:
		return "ibv"
	}
	return "tcp"
}

// haveIBV reports whether an ibv device opens here (the ibv provider is
// linked in only with the rdma build tag). The probe's device is closed;
// the endpoint opens its own if a peer is reached over ibv. A device the
// user selected (Options.IBDevices) that does not open is an error, not a
// reason to use tcp.
func (ep *Endpoint) haveIBV(ctx context.Context) (bool, error) {
	if !slices.Contains(verbs.Providers(), "ibv") {
		return false, nil
	}
	d, err := ep.openDevice(ctx, "ibv")
	if err != nil {
		if ep.opts.IBDevices != "" {
			return false, fmt.Errorf("opening the ibv device selected by %q: %w", ep.opts.IBDevices, err)
		}
		return false, nil
	}
	_ = d.Close()
	return true, nil
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

func (ep *Endpoint) openDevice(ctx context.Context, provider string) (verbs.Device, error) {
	o := ep.opts.Device
	if provider == "ibv" && ep.opts.IBDevices != "" {
		o.Name = ep.opts.IBDevices
	}
	if ep.opts.OpenDevice != nil {
		return ep.opts.OpenDevice(ctx, provider, o)
	}
	return verbs.Open(ctx, provider, o)
}
