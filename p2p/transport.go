package p2p

import "github.com/rdmago/rdmago/verbs"

// autoProvider is the provider used when Options.Provider is empty.
func autoProvider() string {
	for _, n := range verbs.Providers() {
		if n == "tcp" {
			return n
		}
	}
	return "tcp"
}
