package collectives

import "github.com/rdmago/rdmago/internal/shmsync"

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

// ShmLight says whether e publishes lightly: 1 yes, -1 no, 0 not known yet.
func ShmLight(e *Engine) int8 { return e.shm.light }

// ShmFencesWord is rank r's fences word in e's region (see Light publishing).
func ShmFencesWord(e *Engine, r int) *uint32 { return word32(e.shm.mem[r], shmFences) }

// ShmWaitPolicy is the policy of the Engine's shared-memory waits.
func ShmWaitPolicy(e *Engine) shmsync.Policy { return e.shm.policy }

// ShmWaitPolicyFor is shmWaitPolicy: how a region's policy p is adapted.
var ShmWaitPolicyFor = shmWaitPolicy

// lastPublished returns the slot e wrote last and its chunk, as the
// slot's header sizes it.
func lastPublished(e *Engine) (slot, data []byte) {
	s := e.shm
	slot = s.mem[e.rank][s.slotOff(s.next^1):]
	var h header
	getShmHeader(slot, &h)
	return slot, dataOf(slot, int(h.payload))
}

// ShmPublished is the data of the chunk e published last.
func ShmPublished(e *Engine) []byte {
	_, d := lastPublished(e)
	return append([]byte(nil), d...)
}

// ShmPublishedAt is where in its slot the chunk e published last lies
// (offset from the slot's start, and length).
func ShmPublishedAt(e *Engine) (off, n int) {
	slot, d := lastPublished(e)
	return cap(slot) - cap(d), len(d)
}

// ShmQuickEnds is how many of e's calls ended without taking its lock
// (endQuick).
func ShmQuickEnds(e *Engine) int { return e.shm.quick }

// Settled settles e's bookkeeping as the next taker of its lock would and
// reports it: whether a call still counts as running, the counter of the
// latest call that succeeded, and whether a shared-memory call still runs.
func Settled(e *Engine) (running bool, okCalls uint64, shmCall bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settleLocked()
	return e.cur != nil, e.okCalls, e.shmCall
}

// ShmOwnedEntry is the entry whose line e last took for writing at the
// end of a call (-1 for none), and ShmEntries how many entries a rank has.
func ShmOwnedEntry(e *Engine) int { return e.shm.ownedEntry }

const ShmEntries = shmEntries

// ShmSlotOwns is how many of e's publications took their slot's first
// line for writing before writing it.
func ShmSlotOwns(e *Engine) int { return e.shm.line0Owns }

// ShmPrefetches is how many of e's polls prefetched a chunk's lines.
func ShmPrefetches(e *Engine) int { return e.shm.prefetches }

// HierBig says whether e's hierarchical algorithms take their bandwidth
// forms for n bytes.
func HierBig(e *Engine, n int) bool { return e.hierBig(n) }

// SetShmCPU makes e's shared-memory waits take f's answer for the CPU
// they run on (see Keeping the CPU); call it before e's first call.
func SetShmCPU(e *Engine, f func() int) { e.shm.cpu = f }

// ShmKept is how many of e's shared-memory waits ended while keeping the
// CPU (keepCPU).
func ShmKept(e *Engine) int { return e.shm.kept }
