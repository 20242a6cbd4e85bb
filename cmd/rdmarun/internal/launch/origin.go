package launch

import (
	"slices"

	"github.com/rdmago/rdmago/bootstrap"
)

// Where a failure began. The first rank to exit non-zero is usually a
// survivor: the rank that was killed, stopped or cut off cannot say
// anything, and the others exit as soon as they notice. So each rank whose
// first failure began elsewhere reports it to the rendezvous (see
// bootstrap.FailureKey): the rank it lost, the rank whose revoke or
// refusal reached it, the other side of a disagreement. The origin is the
// rank those reports name most; a tie goes to the rank named first. A
// report naming a rank that had already reported a failure of its own
// counts for that failure's origin: the named rank closed on its way out.

// origin is the rank where the failure began by the reports, with the
// reports that name it; ok is false without reports.
type origin struct {
	rank      int
	reports   []bootstrap.FailureReport // those that name rank
	followers []int                     // every other reporting rank, sorted
}

func findOrigin(reports []bootstrap.FailureReport) (origin, bool) {
	votes := map[int]float64{}
	first := map[int]int{}      // rank → index of the first report naming it
	resolved := map[int][]int{} // reporter → the origins its report resolves to
	names := map[int][]int{}    // reporter → the ranks its report names
	for _, f := range reports {
		names[f.Rank] = f.Origins
	}
	// contested says that rank r's report names a rank that names r back:
	// the two lost each other (the link between them broke, or one was
	// cut off and reported first), so r did not leave because of the
	// rank it named, and its report is no chain to follow.
	contested := func(r int) bool {
		for _, x := range names[r] {
			if slices.Contains(names[x], r) {
				return true
			}
		}
		return false
	}
	for i, f := range reports {
		// A rank this one saw close or vanish, which had reported a
		// failure of its own before, left because of that failure (it
		// closed or exited on its way out): follow it to its origins,
		// unless that report is contested. A chain that leads back to
		// this reporter is no evidence. (A disagreement or a refusal is
		// about the call itself: its two sides report each other, and
		// neither is a consequence.)
		follow := f.Kind == "closed" || f.Kind == "lost" || f.Kind == "revoked"
		var os []int
		for _, o := range f.Origins {
			via, ok := resolved[o]
			if !ok || !follow || contested(o) {
				via = []int{o}
			}
			for _, x := range via {
				if x != f.Rank && !slices.Contains(os, x) {
					os = append(os, x)
				}
			}
		}
		resolved[f.Rank] = os
		for _, o := range os {
			votes[o] += 1 / float64(len(os))
			if _, seen := first[o]; !seen {
				first[o] = i
			}
		}
	}
	best := -1
	for r, v := range votes {
		if best < 0 || v > votes[best] || v == votes[best] && first[r] < first[best] {
			best = r
		}
	}
	if best < 0 {
		return origin{}, false
	}
	o := origin{rank: best}
	for _, f := range reports {
		if f.Rank == best {
			continue
		}
		if slices.Contains(resolved[f.Rank], best) {
			o.reports = append(o.reports, f)
		}
		// A rank that failed on another survivor (which had exited
		// because of the origin) failed because of the origin too.
		o.followers = append(o.followers, f.Rank)
	}
	slices.Sort(o.followers)
	return o, true
}

// kind is how most reports naming the origin saw it ("lost" for a revoke
// too); a tie goes to the likelier cause: a loss, a refusal, a
// disagreement, then an early close (often a consequence: a rank that
// failed closes its communicator on the way out).
func (o origin) kind() string {
	n := map[string]int{}
	for _, f := range o.reports {
		k := f.Kind
		if k == "revoked" {
			k = "lost"
		}
		n[k]++
	}
	best := ""
	for _, k := range []string{"lost", "invalid", "mismatch", "closed"} {
		if n[k] > n[best] {
			best = k
		}
	}
	return best
}

// what says in words how the reports saw the origin.
func (o origin) what() string {
	switch o.kind() {
	case "lost":
		return "was lost"
	case "closed":
		return "closed its communicator early"
	case "invalid":
		return "refused a collective's arguments"
	case "mismatch":
		return "called a collective with arguments that differ from the others'"
	}
	return "failed"
}

// firstDetail is the first report's error of that kind, of a direct
// observation when there is one (a revoke only repeats it).
func (o origin) firstDetail() string {
	k := o.kind()
	for _, f := range o.reports {
		if f.Kind == k {
			return f.Detail
		}
	}
	if len(o.reports) > 0 {
		return o.reports[0].Detail
	}
	return ""
}
