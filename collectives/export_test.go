package collectives

import (
	"unsafe"

	"github.com/rdmago/rdmago/internal/shmsync"
)

// BcastSplits reports whether a two-rank shared-memory bcast of n bytes
// splits the copy under the default model.
func BcastSplits(n int) bool { return defModel.bcastSplits(n) }

// ShmClaimWaits is how many of e's slot claims have looked at a reader's
// done word (the shared-memory algorithms' shmClaim).
func ShmClaimWaits(e *Engine) int { return e.shm.waits }

// ShmRounds is how many rounds e has published through its slots.
func ShmRounds(e *Engine) int { return e.shm.rounds }

// ShmDoneStores is how many times e has stored its done word.
func ShmDoneStores(e *Engine) int { return e.shm.stores }

// ShmWaitPolicy is the policy of the Engine's shared-memory waits.
func ShmWaitPolicy(e *Engine) shmsync.Policy { return e.shm.policy }

// ShmWaitPolicyFor is shmWaitPolicy: how a region's policy p is adapted.
var ShmWaitPolicyFor = shmWaitPolicy

// ShmPublished is the data of the chunk e published last (the slot it
// wrote last, as its header sizes it).
func ShmPublished(e *Engine) []byte {
	s := e.shm
	slot := s.mem[e.rank][s.slotOff(s.next^1):]
	n := int(getShmHeader(slot[8 : 8+shmHdrLen]).payload)
	return append([]byte(nil), dataOf(slot, n)...)
}

// ShmPublishedAt is where in its slot the chunk e published last lies
// (offset from the slot's start, and length).
func ShmPublishedAt(e *Engine) (off, n int) {
	s := e.shm
	slot := s.mem[e.rank][s.slotOff(s.next^1):]
	n = int(getShmHeader(slot[8 : 8+shmHdrLen]).payload)
	d := dataOf(slot, n)
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(d))) - uintptr(unsafe.Pointer(unsafe.SliceData(slot)))), n
}
