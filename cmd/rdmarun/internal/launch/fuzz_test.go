package launch

import (
	"strings"
	"testing"
)

// The parsers take text from users; they must answer with a usage error or
// a well-formed result, never panic.

func FuzzParseHostfile(f *testing.F) {
	for _, s := range []string{"a slots=2\nb\n", "# c\n\nx max_slots=3 slots=1", "a slots=0", "a b=c d", "[::1] slots=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		hosts, err := ParseHostfile(strings.NewReader(text), "f")
		if err != nil {
			if !IsUsage(err) {
				t.Fatalf("error is not a usage error: %v", err)
			}
			return
		}
		checkHosts(t, hosts)
	})
}

func FuzzParseHostList(f *testing.F) {
	for _, s := range []string{"a:2,b:2", "a", "[::1]:3", "a:,b", ",", "a:99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ParseHostList(s)
		if err != nil {
			if !IsUsage(err) {
				t.Fatalf("error is not a usage error: %v", err)
			}
			return
		}
		checkHosts(t, hosts)
	})
}

func checkHosts(t *testing.T, hosts []Host) {
	t.Helper()
	if len(hosts) == 0 {
		t.Fatal("no hosts and no error")
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		if h.Slots < 1 || (h.MaxSlots != 0 && h.MaxSlots < 1) || checkHostName(h.Name) != nil || seen[h.Name] {
			t.Fatalf("bad host %+v", h)
		}
		seen[h.Name] = true
	}
	ps, err := MapRanks(hosts, 7, true)
	if err != nil {
		return // max_slots may forbid 7
	}
	if len(ps) != 7 {
		t.Fatalf("placed %d of 7 ranks", len(ps))
	}
}

// FuzzShellQuote: a quoted word reads back as itself (splitWords parses
// the way a POSIX shell does, without expansions).
func FuzzShellQuote(f *testing.F) {
	for _, s := range []string{"", "a", "it's", `"$x"`, "a b\tc", "\\", "'''"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words, err := splitWords(shellQuote(s))
		if err != nil {
			t.Fatalf("quote %q: %v", s, err)
		}
		if len(words) != 1 || words[0] != s {
			t.Fatalf("quote %q read back as %q", s, words)
		}
	})
}

func FuzzParseArgs(f *testing.F) {
	f.Add("-np\x004\x00--host\x00a:2\x00prog\x00x")
	f.Add("--timeout=5\x00-x\x00A=b\x00-n\x001\x00p")
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseArgs(strings.Split(s, "\x00"), func(string) (string, bool) { return "v", true })
		if err != nil {
			return
		}
		if a.NP < 1 || a.Program == "" {
			t.Fatalf("accepted %q as %+v", s, a)
		}
	})
}
