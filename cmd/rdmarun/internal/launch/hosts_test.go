package launch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseHostList(t *testing.T) {
	tests := []struct {
		in   string
		want []Host
		err  string
	}{
		{in: "a:2,b:2", want: []Host{{Name: "a", Slots: 2, Origin: "--host"}, {Name: "b", Slots: 2, Origin: "--host"}}},
		{in: "a,a, b", want: []Host{{Name: "a", Slots: 2, Origin: "--host"}, {Name: "b", Slots: 1, Origin: "--host"}}},
		{in: "[fe80::1]:4,[::1]", want: []Host{{Name: "fe80::1", Slots: 4, Origin: "--host"}, {Name: "::1", Slots: 1, Origin: "--host"}}},
		{in: "node-1.example.org:16", want: []Host{{Name: "node-1.example.org", Slots: 16, Origin: "--host"}}},
		{in: "a:0", err: `slot count "0" is not a number in 1..1048576`},
		{in: "a:x", err: `slot count "x"`},
		{in: "a,,b", err: "empty host name"},
		{in: "fe80::1", err: "write an IPv6 address in brackets"},
		{in: "[::1", err: "unclosed ["},
		{in: "-oProxyCommand=x", err: "starts with '-'"},
		{in: "a;rm", err: `contains ';'`},
	}
	for _, tt := range tests {
		got, err := ParseHostList(tt.in)
		if tt.err != "" {
			require.Error(t, err, tt.in)
			assert.Contains(t, err.Error(), tt.err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		assert.Equal(t, tt.want, got, tt.in)
	}
}

func TestParseHostfile(t *testing.T) {
	good := `# cluster
node1 slots=4
node2 slots=2 max_slots=3   # trailing comment

node3
node1 slots=1
`
	hosts, err := ParseHostfile(strings.NewReader(good), "hf")
	require.NoError(t, err)
	assert.Equal(t, []Host{
		{Name: "node1", Slots: 5, Origin: "hf:2"},
		{Name: "node2", Slots: 2, MaxSlots: 3, Origin: "hf:3"},
		{Name: "node3", Slots: 1, Origin: "hf:5"},
	}, hosts)

	bad := []struct{ text, err string }{
		{"a slots=2\nb slots=two\n", `hostfile hf:2: slots="two": want a number in 1..1048576`},
		{"a\n\n# x\nb slots=0\n", `hostfile hf:4: slots="0"`},
		{"a cores=2\n", `hostfile hf:1: unknown key "cores"`},
		{"a slots\n", `hostfile hf:1: "slots": want key=value`},
		{"a slots=2 slots=3\n", "hostfile hf:1: slots given twice"},
		{"a slots=4 max_slots=2\n", "hostfile hf:1: max_slots=2 is less than slots=4"},
		{"ok\nb|c slots=1\n", `hostfile hf:2: host name "b|c" contains '|'`},
		{"# nothing\n\n", "hostfile hf: no hosts in it"},
	}
	for _, b := range bad {
		_, err := ParseHostfile(strings.NewReader(b.text), "hf")
		require.Error(t, err, b.text)
		assert.Contains(t, err.Error(), b.err)
		assert.True(t, IsUsage(err))
	}

	_, err = ReadHostfile(filepath.Join(t.TempDir(), "missing"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no such file")

	path := filepath.Join(t.TempDir(), "hosts")
	require.NoError(t, os.WriteFile(path, []byte("x slots=2\n"), 0o644))
	hosts, err = ReadHostfile(path)
	require.NoError(t, err)
	assert.Equal(t, []Host{{Name: "x", Slots: 2, Origin: path + ":1"}}, hosts)
}

func TestMapRanks(t *testing.T) {
	hosts := []Host{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}}
	got, err := MapRanks(hosts, 4, false)
	require.NoError(t, err)
	assert.Equal(t, []Placement{
		{Rank: 0, Host: "a", LocalRank: 0, LocalSize: 2}, {Rank: 1, Host: "a", LocalRank: 1, LocalSize: 2},
		{Rank: 2, Host: "b", LocalRank: 0, LocalSize: 2}, {Rank: 3, Host: "b", LocalRank: 1, LocalSize: 2},
	}, got)

	got, err = MapRanks(hosts, 3, false)
	require.NoError(t, err)
	assert.Equal(t, []Placement{
		{Rank: 0, Host: "a", LocalRank: 0, LocalSize: 2}, {Rank: 1, Host: "a", LocalRank: 1, LocalSize: 2},
		{Rank: 2, Host: "b", LocalRank: 0, LocalSize: 1},
	}, got)

	_, err = MapRanks(hosts, 5, false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "-np 5 is more than the 4 slots on a:2,b:2; add --oversubscribe")

	got, err = MapRanks(hosts, 6, true)
	require.NoError(t, err)
	hostsOf := func(ps []Placement) string {
		var s []string
		for _, p := range ps {
			s = append(s, p.Host)
		}
		return strings.Join(s, "")
	}
	assert.Equal(t, "aabbaa", hostsOf(got))
	assert.Equal(t, 4, got[0].LocalSize)
	assert.Equal(t, 3, got[5].LocalRank)

	capped := []Host{{Name: "a", Slots: 1, MaxSlots: 2}, {Name: "b", Slots: 1}}
	got, err = MapRanks(capped, 5, true)
	require.NoError(t, err)
	assert.Equal(t, "ababb", hostsOf(got))
	_, err = MapRanks([]Host{{Name: "a", Slots: 1, MaxSlots: 1}}, 2, true)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "max_slots")
}

func TestIsLocalHost(t *testing.T) {
	hn, err := os.Hostname()
	require.NoError(t, err)
	for _, h := range []string{"localhost", "127.0.0.1", "::1", "127.0.0.2", hn} {
		assert.True(t, isLocalHost(h), h)
	}
	for _, h := range []string{"node-that-is-not-here", "192.0.2.1", "rdmatest-ns"} {
		assert.False(t, isLocalHost(h), h)
	}
}
