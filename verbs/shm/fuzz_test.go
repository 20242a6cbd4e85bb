//go:build linux

package shm

import (
	"testing"

	"github.com/rdmago/rdmago/verbs"
)

// FuzzAddress: the shm payload of a QP address (which a peer or a corrupt
// bootstrap may hand us) never panics the decoder, and what decodes
// re-encodes to itself.
func FuzzAddress(f *testing.F) {
	good := func(host, sock string) []byte {
		p := []byte{1, byte(len(host))}
		p = append(p, host...)
		p = append(p, make([]byte, 16)...)
		p = append(p, byte(len(sock)))
		return append(p, sock...)
	}
	f.Add(good("boot/netns:4:1", "rdmago-shm.x"))
	f.Add([]byte{1, 0})
	f.Add([]byte{})
	f.Add([]byte{2, 1, 'a'})
	f.Fuzz(func(t *testing.T, payload []byte) {
		p, err := decodePayload(payload)
		if err != nil {
			return
		}
		if len(p.sock) == 0 || len(p.host) > 255 {
			t.Fatalf("accepted %+v", p)
		}
		addr, err := verbs.QPAddress{Provider: providerName, QPNum: 7, Payload: payload}.Encode()
		if err != nil {
			return // too long for the envelope
		}
		h, err := AddressHostID(addr)
		if err != nil || h != p.host {
			t.Fatalf("AddressHostID = %q, %v; want %q", h, err, p.host)
		}
	})
}
