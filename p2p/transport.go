package p2p

import (
	"context"
	"fmt"

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
// for everybody. The choice per peer is visible with Endpoint.Transport.

const hostKey = "host/"

func (ep *Endpoint) chooseProviders(ctx context.Context, rv Rendezvous) error {
	ep.provider = make([]string, ep.size)
	if ep.opts.Provider != "" && ep.opts.Provider != "auto" {
		for r := range ep.provider {
			ep.provider[r] = ep.opts.Provider
		}
		return nil
	}
	id, err := shm.HostID()
	if err != nil {
		id = ""
	}
	prefix := "p2p/" + ep.opts.Name + "/" + hostKey
	if err := rv.Put(ctx, fmt.Sprintf("%s%d", prefix, ep.rank), []byte(id)); err != nil {
		return err
	}
	// A PMI key-value space publishes puts only at a fence.
	if err := rv.Fence(ctx); err != nil {
		return err
	}
	for r := range ep.provider {
		if r == ep.rank {
			continue
		}
		v, err := rv.Get(ctx, fmt.Sprintf("%s%d", prefix, r))
		if err != nil {
			return err
		}
		if id != "" && string(v) == id {
			ep.provider[r] = "shm"
		} else {
			ep.provider[r] = "tcp"
		}
	}
	ep.provider[ep.rank] = "tcp"
	return nil
}

func (ep *Endpoint) openDevice(ctx context.Context, provider string) (verbs.Device, error) {
	if ep.opts.OpenDevice != nil {
		return ep.opts.OpenDevice(ctx, provider, ep.opts.Device)
	}
	return verbs.Open(ctx, provider, ep.opts.Device)
}
