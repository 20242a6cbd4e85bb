//go:build linux

package softrc

import (
	"context"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// arrivalSet watches the sockets of a CQ's links with one epoll set, so
// that a crowded poller's look for arrived bytes (CQ.Arrived) is one
// epoll_wait whatever the number of links, rather than an ioctl per link:
// where ranks outnumber the CPUs, every system call of a poll that finds
// nothing is time taken from the rank that has work. Level-triggered, so
// bytes left for a link's own goroutine show again at the next look.
type arrivalSet struct {
	epfd int
	mu   sync.Mutex // guards ids, of and broken
	ids  map[int32]FDArriver
	of   map[FDArriver]int32
	next int32
	// broken: a link could not be watched (no descriptor, epoll_ctl
	// failed); Arrived then asks every link instead.
	broken bool
	// writers: the watched links that can say their own goroutine is
	// writing (Writer), which epoll does not show; copied on change.
	writers []Writer
	wait    sync.Mutex // one epoll_wait at a time, into ev
	ev      [16]unix.EpollEvent
	ready   [16]FDArriver
}

func newArrivalSet() *arrivalSet {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil
	}
	return &arrivalSet{epfd: fd, ids: map[int32]FDArriver{}, of: map[FDArriver]int32{}}
}

// add watches d's socket; a d that cannot be watched breaks the set.
func (s *arrivalSet) add(d Driver) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fa, ok := d.(FDArriver)
	if !ok {
		s.broken = true
		return
	}
	if _, dup := s.of[fa]; dup {
		return
	}
	s.next++
	id := s.next
	var cerr error
	err := fa.ControlFD(func(fd int) {
		// The event carries the link's id, not the descriptor, which
		// may be another socket's by the time the event is read.
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: id}
		cerr = unix.EpollCtl(s.epfd, unix.EPOLL_CTL_ADD, fd, &ev)
	})
	if err != nil || cerr != nil {
		s.broken = true // Arrived asks every link from now on
		return
	}
	s.ids[id], s.of[fa] = fa, id
	if w, ok := d.(Writer); ok {
		s.writers = append(slices.Clip(s.writers), w)
	}
}

// remove stops watching d (its socket may be closed already, which took
// it out of the set by itself).
func (s *arrivalSet) remove(d Driver) {
	fa, ok := d.(FDArriver)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.of[fa]
	if !ok {
		return
	}
	delete(s.of, fa)
	delete(s.ids, id)
	if w, ok := d.(Writer); ok {
		if i := slices.Index(s.writers, w); i >= 0 {
			s.writers = slices.Delete(slices.Clone(s.writers), i, i+1)
		}
	}
	_ = fa.ControlFD(func(fd int) { _ = unix.EpollCtl(s.epfd, unix.EPOLL_CTL_DEL, fd, nil) })
}

// close closes the set; a poller in epoll_wait finishes first, so that
// its descriptor is never another file's by then.
func (s *arrivalSet) close() {
	s.wait.Lock()
	_ = unix.Close(s.epfd)
	s.epfd = -1
	s.wait.Unlock()
}

// arrived is CQ.Arrived by the set; ok false means the set cannot tell
// (broken) and the caller asks every link.
func (s *arrivalSet) arrived(ctx context.Context, c *CQ) (took, waiting, ok bool) {
	s.mu.Lock()
	broken, writers := s.broken, s.writers
	s.mu.Unlock()
	if broken {
		return false, false, false
	}
	for _, w := range writers {
		if w.Writing() {
			return false, true, true // see Writer
		}
	}
	if !s.wait.TryLock() {
		return false, false, true // another poller is looking right now
	}
	if s.epfd < 0 {
		s.wait.Unlock()
		return false, false, true // the CQ closed
	}
	n, err := unix.EpollWait(s.epfd, s.ev[:], 0)
	k := 0
	if err == nil && n > 0 {
		s.mu.Lock()
		for i := range s.ev[:n] {
			if d, ok := s.ids[s.ev[i].Fd]; ok {
				s.ready[k] = d
				k++
			}
		}
		s.mu.Unlock()
	}
	ready := s.ready
	clear(s.ready[:k])
	s.wait.Unlock()
	for _, d := range ready[:k] {
		t, l := c.take(ctx, d)
		took, waiting = took || t, waiting || l
	}
	return took, waiting, true
}
