package launch

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rdmago/rdmago/bootstrap"
)

func TestFindOrigin(t *testing.T) {
	rep := func(rank int, kind string, origins ...int) bootstrap.FailureReport {
		return bootstrap.FailureReport{Rank: rank, Kind: kind, Origins: origins}
	}
	cases := []struct {
		name      string
		reports   []bootstrap.FailureReport
		want      int
		followers []int
		what      string
	}{
		{"stopped rank, which reports a survivor after SIGCONT",
			[]bootstrap.FailureReport{rep(3, "lost", 2), rep(0, "lost", 2), rep(1, "revoked", 2), rep(2, "lost", 0)},
			2, []int{0, 1, 3}, "was lost"},
		{"count mismatch: both neighbours name the odd rank",
			[]bootstrap.FailureReport{rep(4, "mismatch", 3), rep(3, "mismatch", 2), rep(2, "mismatch", 3)},
			3, []int{2, 4}, "called a collective with arguments that differ from the others'"},
		{"refused arguments", []bootstrap.FailureReport{rep(0, "invalid", 2), rep(5, "invalid", 2)}, 2, []int{0, 5}, "refused a collective's arguments"},
		{"a tie goes to the rank named first",
			[]bootstrap.FailureReport{rep(0, "lost", 3), rep(3, "lost", 0)}, 3, []int{0}, "was lost"},
		{"a chain of exits after an early close",
			[]bootstrap.FailureReport{rep(3, "closed", 1), rep(2, "closed", 1), rep(0, "closed", 2)},
			1, []int{0, 2, 3}, "closed its communicator early"},
		{"a mismatch whose suspect also closed on the way out",
			[]bootstrap.FailureReport{rep(4, "mismatch", 3), rep(2, "closed", 3), rep(0, "mismatch", 3), rep(1, "mismatch", 3)},
			3, []int{0, 1, 2, 4}, "called a collective with arguments that differ from the others'"},
		{"survivors that fail on a survivor's exit count for its origin",
			[]bootstrap.FailureReport{rep(2, "closed", 1), rep(0, "closed", 2), rep(3, "closed", 2)},
			1, []int{0, 2, 3}, "closed its communicator early"},
		{"the two sides of a mismatch report each other first",
			[]bootstrap.FailureReport{rep(3, "mismatch", 4), rep(4, "mismatch", 3), rep(0, "mismatch", 3), rep(2, "mismatch", 3), rep(1, "mismatch", 3)},
			3, []int{0, 1, 2, 4}, "called a collective with arguments that differ from the others'"},
		{"a rank cut off from the others reports one of them first (its reports still reach the rendezvous)",
			[]bootstrap.FailureReport{rep(2, "lost", 0), rep(1, "lost", 2), rep(0, "revoked", 2)},
			2, []int{0, 1}, "was lost"},
		{"a rank cut off reports both others first",
			[]bootstrap.FailureReport{rep(2, "lost", 0, 1), rep(1, "lost", 2), rep(0, "lost", 2), rep(3, "revoked", 2)},
			2, []int{0, 1, 3}, "was lost"},
		{"a report naming its own rank is no evidence", []bootstrap.FailureReport{rep(1, "lost", 1)}, -1, nil, ""},
		{"no reports", nil, -1, nil, ""},
	}
	for _, c := range cases {
		o, ok := findOrigin(c.reports)
		if c.want < 0 {
			assert.False(t, ok, c.name)
			continue
		}
		if assert.True(t, ok, c.name) {
			assert.Equal(t, c.want, o.rank, c.name)
			assert.Equal(t, c.followers, o.followers, c.name)
			assert.Equal(t, c.what, o.what(), c.name)
		}
	}
	assert.Equal(t, "ranks 0, 2 and 5-7", bootstrap.FormatRanks([]int{0, 2, 5, 6, 7}))
}
