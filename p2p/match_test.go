package p2p

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The matching rules as a table: a script of arrivals ("a") and receive
// posts ("r") in order, and for each step what it matched (the name of the
// message or receive it paired with, or "" for "queued").
func TestMatcherRules(t *testing.T) {
	type step struct {
		op   byte // 'a' arrive, 'r' post receive
		name string
		ctx  uint32
		src  int
		tag  int32
		want string
	}
	A, R := byte('a'), byte('r')
	cases := []struct {
		name  string
		steps []step
	}{
		{"exact match, message first", []step{
			{A, "m1", 0, 1, 5, ""},
			{R, "r1", 0, 1, 5, "m1"},
		}},
		{"exact match, receive first", []step{
			{R, "r1", 0, 1, 5, ""},
			{A, "m1", 0, 1, 5, "r1"},
		}},
		{"tag differs", []step{
			{A, "m1", 0, 1, 5, ""},
			{R, "r1", 0, 1, 6, ""},
			{A, "m2", 0, 1, 6, "r1"},
		}},
		{"source differs", []step{
			{R, "r1", 0, 2, 5, ""},
			{A, "m1", 0, 1, 5, ""},
			{A, "m2", 0, 2, 5, "r1"},
		}},
		{"context isolates", []step{
			{A, "m1", 1, 1, 5, ""},
			{R, "r1", 0, 1, 5, ""},
			{R, "r2", 0, AnySource, AnyTag, ""},
			{A, "m2", 0, 1, 5, "r1"},
			{R, "r3", 1, AnySource, AnyTag, "m1"},
		}},
		{"non-overtaking: same source and tag in sending order", []step{
			{A, "m1", 0, 1, 5, ""},
			{A, "m2", 0, 1, 5, ""},
			{R, "r1", 0, 1, 5, "m1"},
			{R, "r2", 0, 1, 5, "m2"},
		}},
		{"non-overtaking with wildcards", []step{
			{A, "m1", 0, 1, 5, ""},
			{A, "m2", 0, 1, 6, ""},
			{A, "m3", 0, 2, 5, ""},
			{R, "r1", 0, AnySource, AnyTag, "m1"},
			{R, "r2", 0, AnySource, 5, "m3"},
			{R, "r3", 0, 1, AnyTag, "m2"},
		}},
		{"oldest posted receive wins", []step{
			{R, "r1", 0, AnySource, 5, ""},
			{R, "r2", 0, 1, 5, ""},
			{A, "m1", 0, 1, 5, "r1"},
			{A, "m2", 0, 1, 5, "r2"},
		}},
		{"wildcard receive skips non-fitting to a later fitting message", []step{
			{A, "m1", 0, 3, 9, ""},
			{R, "r1", 0, AnySource, 4, ""},
			{A, "m2", 0, 2, 4, "r1"},
			{R, "r2", 0, 3, AnyTag, "m1"},
		}},
		{"posted receives in order for the same pattern", []step{
			{R, "r1", 0, 1, AnyTag, ""},
			{R, "r2", 0, 1, AnyTag, ""},
			{R, "r3", 0, 1, AnyTag, ""},
			{A, "m1", 0, 1, 1, "r1"},
			{A, "m2", 0, 1, 2, "r2"},
			{A, "m3", 0, 1, 3, "r3"},
			{A, "m4", 0, 1, 4, ""},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var m matcher
			names := map[any]string{}
			for i, s := range c.steps {
				env := envelope{ctx: s.ctx, src: s.src, tag: s.tag}
				got := ""
				switch s.op {
				case 'a':
					if r := m.arrive(env); r != nil {
						got = names[r]
					} else {
						in := &inbound{env: env}
						names[in] = s.name
						m.addUnexpected(in)
					}
				case 'r':
					if in := m.find(env, true); in != nil {
						got = names[in]
					} else {
						r := &Request{pattern: env}
						names[r] = s.name
						m.post(r)
					}
				}
				require.Equal(t, s.want, got, "step %d (%s)", i, s.name)
			}
		})
	}
}

func TestMatcherUnpostAndProbe(t *testing.T) {
	var m matcher
	r1 := &Request{pattern: envelope{src: 1, tag: 1}}
	r2 := &Request{pattern: envelope{src: 1, tag: 1}}
	m.post(r1)
	m.post(r2)
	assert.True(t, m.unpost(r1))
	assert.False(t, m.unpost(r1))
	assert.Same(t, r2, m.arrive(envelope{src: 1, tag: 1}))
	assert.Nil(t, m.arrive(envelope{src: 1, tag: 1}))

	in := &inbound{env: envelope{src: 2, tag: 3}, size: 10}
	m.addUnexpected(in)
	// A probe (remove=false) leaves it for the receive.
	assert.Same(t, in, m.find(envelope{src: AnySource, tag: AnyTag}, false))
	assert.Same(t, in, m.find(envelope{src: 2, tag: 3}, true))
	assert.Nil(t, m.find(envelope{src: AnySource, tag: AnyTag}, false))
	assert.Zero(t, m.unexp.len())
}

// TestFifo: the matcher's queues keep order through removals anywhere,
// take the oldest entry without moving the others (a window of receives
// would otherwise copy the whole queue per message), take one near the
// front by moving only those in front of it, and cycle through a
// steady window without allocating.
func TestFifo(t *testing.T) {
	var q fifo[int]
	var model []*int
	vals := make([]int, 1000)
	check := func() {
		t.Helper()
		require.Equal(t, len(model), q.len())
		for i, p := range q.items() {
			require.Same(t, model[i], p, "entry %d", i)
		}
	}
	next := 0
	for step := range 3000 {
		switch {
		case step%7 == 3 && q.len() > 2: // from the middle
			i := q.len() / 2
			q.removeAt(i)
			model = append(model[:i:i], model[i+1:]...)
		case step%3 == 2 && q.len() > 0: // the oldest
			q.removeAt(0)
			model = model[1:]
		case step%11 == 5 && q.len() > 3: // the second oldest
			q.removeAt(1)
			model = append(model[:1:1], model[2:]...)
		default:
			p := &vals[next%len(vals)]
			next++
			q.push(p)
			model = append(model, p)
		}
		check()
	}

	q.reset()
	for i := range 64 {
		q.push(&vals[i])
	}
	second := &q.items()[1]
	q.removeAt(0)
	require.Same(t, second, &q.items()[0], "taking the oldest moved the others")
	require.Nil(t, q.s[q.head-1], "the oldest's slot keeps it alive")
	// The second oldest (a user receive behind comm's any-source one)
	// moves only the oldest, not the rest of the window.
	third := &q.items()[2]
	q.removeAt(1)
	require.Same(t, third, &q.items()[1], "taking the second oldest moved the ones behind it")

	allocs := testing.AllocsPerRun(100, func() {
		for i := range 64 {
			q.push(&vals[i])
		}
		for range 64 {
			q.removeAt(0)
		}
	})
	require.Zero(t, allocs)
}
