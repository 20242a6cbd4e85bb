//go:build !linux

package softrc

import "context"

// arrivalSet is Linux's epoll set of a CQ's links (arrivals_linux.go);
// elsewhere CQ.Arrived asks every link.
type arrivalSet struct{}

func newArrivalSet() *arrivalSet { return nil }

func (s *arrivalSet) add(Driver)    {}
func (s *arrivalSet) remove(Driver) {}
func (s *arrivalSet) close()        {}

func (s *arrivalSet) arrived(context.Context, *CQ) (took, waiting, ok bool) {
	return false, false, false
}
