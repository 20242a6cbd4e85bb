package bootstrap

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Failure reports. When a rank's operation first fails because of another
// rank (a lost peer, a revoke, a peer that refused a collective's
// arguments or disagrees about them, a peer that left early), the rank
// puts a report under FailureKey(rank) before it returns the error; the
// launcher's server keeps them in arrival order (Server.Failures), so that
// the launcher names the rank where the failure began rather than the
// first rank to exit, which is usually a survivor.

const failurePrefix = "rdmago/failure/"

// FailureKey is the key of rank's failure report.
func FailureKey(rank int) string { return failurePrefix + strconv.Itoa(rank) }

// FailureReport is what one rank saw first.
type FailureReport struct {
	Rank    int    // the reporting rank (the server takes it from the connection)
	Kind    string // "lost", "revoked", "closed", "invalid", "mismatch"
	Origins []int  // the ranks the reporter's error says the failure began at
	Detail  string // the reporter's error, in words
	At      time.Time
}

// Encode is the report's value: kind, origins and detail on three lines.
func (f FailureReport) Encode() []byte {
	os := make([]string, len(f.Origins))
	for i, o := range f.Origins {
		os[i] = strconv.Itoa(o)
	}
	d := f.Detail
	if len(d) > 512 {
		d = d[:509] + "..."
	}
	return []byte(f.Kind + "\n" + strings.Join(os, ",") + "\n" + d)
}

// DecodeFailure parses a report's value; ok is false for a malformed one.
func DecodeFailure(v []byte) (f FailureReport, ok bool) {
	parts := strings.SplitN(string(v), "\n", 3)
	if len(parts) != 3 || parts[0] == "" {
		return f, false
	}
	f.Kind, f.Detail = parts[0], parts[2]
	if parts[1] != "" {
		for _, s := range strings.Split(parts[1], ",") {
			o, err := strconv.Atoi(s)
			if err != nil || o < 0 {
				return f, false
			}
			f.Origins = append(f.Origins, o)
		}
	}
	return f, true
}

// noteFailureLocked keeps a rank's report (the first per rank). s.mu is held.
func (s *Server) noteFailureLocked(rank int, key string, v []byte) {
	if !strings.HasPrefix(key, failurePrefix) || rank < 0 || len(s.failures) >= 4*s.opts.Size {
		return
	}
	f, ok := DecodeFailure(v)
	if !ok || slices.ContainsFunc(s.failures, func(g FailureReport) bool { return g.Rank == rank }) {
		return
	}
	f.Origins = slices.DeleteFunc(f.Origins, func(o int) bool { return o >= s.opts.Size })
	f.Rank, f.At = rank, time.Now()
	s.failures = append(s.failures, f)
}

// Failures returns the failure reports received so far, in arrival order,
// at most one per rank.
func (s *Server) Failures() []FailureReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.failures)
}
