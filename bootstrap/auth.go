package bootstrap

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
)

// Mutual challenge-response. Each side sends a fresh random nonce; each
// proves knowledge of the token with HMAC-SHA256(token, label || Nc || Ns).
// The labels differ by direction, so a proof the server produced can never
// be replayed as a client's proof (no reflection), and the server's nonce
// makes every client proof unique to one connection (no replay). The token
// itself never crosses the wire.
const (
	labelServer = "rdmago bootstrap v1 server proof"
	labelClient = "rdmago bootstrap v1 client proof"
)

func proof(token []byte, label string, nc, ns *[nonceLen]byte) [macLen]byte {
	h := hmac.New(sha256.New, token)
	h.Write([]byte(label))
	h.Write(nc[:])
	h.Write(ns[:])
	var out [macLen]byte
	copy(out[:], h.Sum(nil))
	return out
}

func checkProof(token []byte, label string, nc, ns *[nonceLen]byte, got [macLen]byte) bool {
	want := proof(token, label, nc, ns)
	return hmac.Equal(want[:], got[:])
}

func newNonce() ([nonceLen]byte, error) {
	var n [nonceLen]byte
	if _, err := rand.Read(n[:]); err != nil {
		return n, fmt.Errorf("bootstrap: random nonce: %w", err)
	}
	return n, nil
}

// NewToken returns a fresh random 32-byte job token, as a launcher hands to
// its ranks.
func NewToken() ([]byte, error) {
	t := make([]byte, 32)
	if _, err := rand.Read(t); err != nil {
		return nil, fmt.Errorf("bootstrap: random token: %w", err)
	}
	return t, nil
}
