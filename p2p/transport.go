package p2p

import (
	"bytes"
	"context"
	"fmt"
	"math/bits"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/shm"
	_ "github.com/rdmago/rdmago/verbs/tcp"
)

// Transport choice.
//
// With Options.Provider set, every peer uses that provider. Otherwise
// ("auto"), each rank publishes its same-host identity (shm.HostID: the
// kernel's boot id plus the network namespace) under
// "p2p/<Name>/host/<rank>", and a peer whose identity equals ours is
// reached over shm, every other peer over tcp. Both ends of a pair compute
// the same answer from the same two identities, so they always agree. A
// rank that cannot compute its identity publishes an empty one and uses tcp
// for everybody. The record also carries the rank's CPU affinity, for the
// wait policy (see encodeHostInfo); with shm forced it is exchanged too. The choice per peer is visible with Endpoint.Transport.

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
	if !forced {
		ep.provider[ep.rank] = "tcp" // a device for windows, even alone
	}
	if ep.size == 1 || forced && ep.opts.Provider != "shm" {
		return nil
	}
	id, err := shm.HostID()
	if err != nil {
		id = ""
	}
	prefix := "p2p/" + ep.opts.Name + "/" + hostKey
	if err := rv.Put(ctx, fmt.Sprintf("%s%d", prefix, ep.rank), encodeHostInfo(id, mine)); err != nil {
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
		pid, mask := decodeHostInfo(v)
		local := id != "" && pid == id
		if !forced {
			ep.provider[r] = "tcp"
			if local {
				ep.provider[r] = "shm"
			}
		}
		if local || forced {
			union = orMask(union, mask)
		}
	}
	ep.localCPUs = onesIn(union)
	return nil
}

// The host record is the host identity, a NUL, then the rank's CPU
// affinity bitmap. The union of the bitmaps of the ranks on a host tells
// the wait policy how many CPUs those ranks share: each rank alone may see
// only its own core (rdmarun --bind-to core), which says nothing about
// whether the ranks outnumber the cores.
func encodeHostInfo(id string, mask []byte) []byte {
	return append(append([]byte(id), 0), mask...)
}

func decodeHostInfo(v []byte) (id string, mask []byte) {
	i := bytes.IndexByte(v, 0)
	if i < 0 {
		return string(v), nil
	}
	return string(v[:i]), v[i+1:]
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
	if ep.opts.OpenDevice != nil {
		return ep.opts.OpenDevice(ctx, provider, ep.opts.Device)
	}
	return verbs.Open(ctx, provider, ep.opts.Device)
}
