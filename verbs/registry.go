package verbs

import (
	"context"
	"fmt"
	"sort"
	"sync"
)

var (
	regMu     sync.RWMutex
	providers = map[string]Provider{}
)

// Register makes a provider available to Open under p.Name(). Providers call
// it from init; registering one name twice panics, as it is a programming error.
func Register(p Provider) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := providers[p.Name()]; dup {
		panic("verbs: provider " + p.Name() + " registered twice")
	}
	providers[p.Name()] = p
}

// Providers lists the registered provider names, sorted.
func Providers() []string {
	regMu.RLock()
	defer regMu.RUnlock()
	names := make([]string, 0, len(providers))
	for n := range providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Preferred lists the providers the automatic transport choice may pick
// (Traits.Preference above zero), most preferred first; ties go by name.
func Preferred() []Provider {
	regMu.RLock()
	defer regMu.RUnlock()
	var ps []Provider
	for _, p := range providers {
		if p.Traits().Preference > 0 {
			ps = append(ps, p)
		}
	}
	sort.Slice(ps, func(i, j int) bool {
		a, b := ps[i].Traits().Preference, ps[j].Traits().Preference
		return a < b || a == b && ps[i].Name() < ps[j].Name()
	})
	return ps
}

// Lookup returns the named provider. The provider's package must be
// imported (for its init) for the name to be known; otherwise the error
// wraps ErrUnavailable.
func Lookup(provider string) (Provider, error) {
	regMu.RLock()
	p, ok := providers[provider]
	regMu.RUnlock()
	if !ok {
		return nil, &Error{Op: "Open", Provider: provider, Index: -1,
			Err: fmt.Errorf("%w: no provider %q registered (known: %v)", ErrUnavailable, provider, Providers())}
	}
	return p, nil
}

// Open opens a device of the named provider (see Lookup).
func Open(ctx context.Context, provider string, opts DeviceOptions) (Device, error) {
	p, err := Lookup(provider)
	if err != nil {
		return nil, err
	}
	return p.Open(ctx, opts)
}
