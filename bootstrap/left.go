package bootstrap

import "strconv"

// Departures. When a rank's connection to the rendezvous closes or breaks
// after the job started (it exited, was killed, or closed its store), the
// store puts LeftKey(rank) with the reason in words. Because the store
// applies a rank's requests in order, every key that rank put is visible
// before its LeftKey is: a survivor that waits for "rank r's key or
// LeftKey(r)" learns for certain whether r's key will ever come. That is
// the failure detector under comm's Shrink. A rank that is stopped or cut
// off from its peers but keeps its rendezvous connection is not reported.

const leftPrefix = "rdmago/left/"

// LeftKey is the key the store puts when rank leaves the job.
func LeftKey(rank int) string { return leftPrefix + strconv.Itoa(rank) }

// noteLeftLocked puts rank's departure and wakes its waiters. s.mu is held.
func (s *Server) noteLeftLocked(rank int, why string) {
	k := LeftKey(rank)
	if _, ok := s.kv[k]; ok {
		return
	}
	v := []byte(why)
	s.kv[k] = v
	for _, w := range s.getters[k] {
		w.c.send(&msg{typ: tValue, id: w.id, value: v})
	}
	delete(s.getters, k)
}
