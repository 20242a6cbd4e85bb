package launch

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
)

// Host is a machine ranks run on, with its slot count. Slots is how many
// ranks it takes before --oversubscribe is needed; MaxSlots (0 = no limit)
// is a hard cap even with --oversubscribe, as in Open MPI.
type Host struct {
	Name     string
	Slots    int
	MaxSlots int
	// Where the host was named, for error messages: "--host" or
	// "hosts.txt:3".
	Origin string
}

// ParseHostList parses a --host value: comma-separated names, each with an
// optional ":SLOTS" ("a:2,b:2", "node1,node1", "[fe80::1]:4"). A name
// without a count has one slot; a name given twice adds up.
func ParseHostList(s string) ([]Host, error) {
	var hosts []Host
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, usagef("--host %q: empty host name", s)
		}
		name, slots := item, 1
		if strings.HasPrefix(item, "[") {
			end := strings.Index(item, "]")
			if end < 0 {
				return nil, usagef("--host %q: unclosed [ in %q", s, item)
			}
			name = item[1:end]
			rest := item[end+1:]
			if rest != "" {
				if !strings.HasPrefix(rest, ":") {
					return nil, usagef("--host %q: unexpected %q after ]", s, rest)
				}
				n, err := parseSlots(rest[1:])
				if err != nil {
					return nil, usagef("--host %q: %s: %v", s, item, err)
				}
				slots = n
			}
		} else if i := strings.LastIndex(item, ":"); i >= 0 {
			if strings.Count(item, ":") > 1 {
				return nil, usagef("--host %q: write an IPv6 address in brackets: [%s]", s, item)
			}
			n, err := parseSlots(item[i+1:])
			if err != nil {
				return nil, usagef("--host %q: %s: %v", s, item, err)
			}
			name, slots = item[:i], n
		}
		if err := checkHostName(name); err != nil {
			return nil, usagef("--host %q: %v", s, err)
		}
		hosts = addHost(hosts, Host{Name: name, Slots: slots, Origin: "--host"})
	}
	return hosts, nil
}

// maxSlots bounds one host's slot count, so sums cannot overflow.
const maxSlots = 1 << 20

func parseSlots(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxSlots {
		return 0, fmt.Errorf("slot count %q is not a number in 1..%d", s, maxSlots)
	}
	return n, nil
}

// checkHostName refuses names that cannot be a host and would be
// dangerous in a launch agent's argument list (a leading '-' reads as an
// ssh option).
func checkHostName(name string) error {
	if name == "" {
		return fmt.Errorf("empty host name")
	}
	if strings.HasPrefix(name, "-") {
		return fmt.Errorf("host name %q starts with '-'", name)
	}
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("-._:@%", c):
		default:
			return fmt.Errorf("host name %q contains %q", name, c)
		}
	}
	return nil
}

func addHost(hosts []Host, h Host) []Host {
	for i := range hosts {
		if hosts[i].Name == h.Name {
			hosts[i].Slots = min(hosts[i].Slots+h.Slots, maxSlots)
			if h.MaxSlots > 0 {
				hosts[i].MaxSlots = min(hosts[i].MaxSlots+h.MaxSlots, maxSlots)
			}
			return hosts
		}
	}
	return append(hosts, h)
}

// ReadHostfile reads an Open MPI hostfile.
func ReadHostfile(path string) ([]Host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef("--hostfile: %v", err)
	}
	defer f.Close()
	return ParseHostfile(f, path)
}

// ParseHostfile parses Open MPI's hostfile format: one host per line,
// optionally followed by "slots=N" and "max_slots=M" (also "slots:N" and
// Open MPI's aliases cpu=, count=); '#' starts a comment; blank lines are
// skipped. A host without slots= has one slot. Errors name the line.
func ParseHostfile(r io.Reader, name string) ([]Host, error) {
	var hosts []Host
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		where := fmt.Sprintf("%s:%d", name, line)
		h := Host{Name: fields[0], Slots: 1, Origin: where}
		if err := checkHostName(h.Name); err != nil {
			return nil, usagef("hostfile %s: %v", where, err)
		}
		slotsSet := false
		for _, f := range fields[1:] {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				k, v, ok = strings.Cut(f, ":")
			}
			if !ok {
				return nil, usagef("hostfile %s: %q: want key=value (slots=N or max_slots=N)", where, f)
			}
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxSlots {
				return nil, usagef("hostfile %s: %s=%q: want a number in 1..%d", where, k, v, maxSlots)
			}
			switch k {
			case "slots", "cpu", "count":
				if slotsSet {
					return nil, usagef("hostfile %s: slots given twice", where)
				}
				h.Slots, slotsSet = n, true
			case "max_slots", "max-slots":
				h.MaxSlots = n
			default:
				return nil, usagef("hostfile %s: unknown key %q (want slots or max_slots)", where, k)
			}
		}
		if h.MaxSlots > 0 && h.MaxSlots < h.Slots {
			return nil, usagef("hostfile %s: max_slots=%d is less than slots=%d", where, h.MaxSlots, h.Slots)
		}
		hosts = addHost(hosts, h)
	}
	if err := sc.Err(); err != nil {
		return nil, usagef("hostfile %s: line %d: %v", name, line+1, err)
	}
	if len(hosts) == 0 {
		return nil, usagef("hostfile %s: no hosts in it", name)
	}
	return hosts, nil
}

// Placement is where one rank runs.
type Placement struct {
	Rank      int
	Host      string
	LocalRank int // index among the ranks on the same host
	LocalSize int // ranks on the same host
}

// MapRanks places np ranks on hosts by slot, as mpirun's default
// --map-by slot: fill the first host's slots, then the next host's. With
// oversubscribe, once every slot is taken it starts over with the first
// host, never passing a host's MaxSlots. Without oversubscribe, np beyond
// the slots is an error naming the counts.
func MapRanks(hosts []Host, np int, oversubscribe bool) ([]Placement, error) {
	total := 0
	for _, h := range hosts {
		total += h.Slots
	}
	if total == 0 {
		return nil, usagef("no hosts to run on")
	}
	if np > total && !oversubscribe {
		names := make([]string, len(hosts))
		for i, h := range hosts {
			names[i] = fmt.Sprintf("%s:%d", h.Name, h.Slots)
		}
		return nil, usagef("-np %d is more than the %d slots on %s; add --oversubscribe to run anyway, or give more slots",
			np, total, strings.Join(names, ",")+"")
	}
	count := make([]int, len(hosts))
	out := make([]Placement, 0, np)
	for len(out) < np {
		progress := false
		for hi, h := range hosts {
			for s := 0; s < h.Slots && len(out) < np; s++ {
				if h.MaxSlots > 0 && count[hi] >= h.MaxSlots {
					break
				}
				out = append(out, Placement{Rank: len(out), Host: h.Name, LocalRank: count[hi]})
				count[hi]++
				progress = true
			}
		}
		if !progress {
			return nil, usagef("-np %d is more than the max_slots of the hosts allow (%d ranks placed)", np, len(out))
		}
	}
	for i := range out {
		for hi, h := range hosts {
			if h.Name == out[i].Host {
				out[i].LocalSize = count[hi]
			}
		}
	}
	return out, nil
}

// isLocalHost reports whether name means the machine rdmarun runs on, so
// its ranks are started directly rather than through the launch agent:
// "localhost", a loopback address, this machine's host name (full or
// short), or one of its interface addresses.
func isLocalHost(name string) bool {
	switch name {
	case "localhost", "localhost.localdomain", "127.0.0.1", "::1":
		return true
	}
	if hn, err := os.Hostname(); err == nil {
		short, _, _ := strings.Cut(hn, ".")
		if name == hn || name == short {
			return true
		}
	}
	if ip := net.ParseIP(name); ip != nil {
		if ip.IsLoopback() {
			return true
		}
		addrs, err := net.InterfaceAddrs()
		if err == nil {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
					return true
				}
			}
		}
	}
	return false
}
