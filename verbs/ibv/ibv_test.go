package ibv

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

func TestRegistered(t *testing.T) {
	assert.Contains(t, verbs.Providers(), "ibv")
	if Available {
		t.Skip("real provider built in; the stub is tested in the default build")
	}
	_, err := verbs.Open(context.Background(), "ibv", verbs.DeviceOptions{})
	require.ErrorIs(t, err, verbs.ErrUnavailable)
	assert.ErrorContains(t, err, "-tags rdma")
}

func TestParseDevices(t *testing.T) {
	e := func(name string, port int, g ...int) DeviceEntry {
		d := DeviceEntry{Name: name, Port: port}
		if len(g) > 0 {
			d.GID = GIDIndex(g[0])
		}
		return d
	}
	for _, tc := range []struct {
		in   string
		want DeviceSpec
		bad  string // part of the error, when the input is refused
	}{
		{in: "", want: DeviceSpec{}},
		{in: "rxe0", want: DeviceSpec{Entries: []DeviceEntry{e("rxe0", 0)}}},
		{in: "mlx5_0:2", want: DeviceSpec{Entries: []DeviceEntry{e("mlx5_0", 2)}}},
		{in: "mlx5_0:1:3", want: DeviceSpec{Entries: []DeviceEntry{e("mlx5_0", 1, 3)}}},
		{in: "mlx5_0:1,mlx5_1", want: DeviceSpec{Entries: []DeviceEntry{e("mlx5_0", 1), e("mlx5_1", 0)}}},
		{in: "=rxe1", want: DeviceSpec{Exact: true, Entries: []DeviceEntry{e("rxe1", 0)}}},
		{in: "^mlx5_2", want: DeviceSpec{Exclude: true, Entries: []DeviceEntry{e("mlx5_2", 0)}}},
		{in: "^=mlx5_1,mlx5_2", want: DeviceSpec{Exclude: true, Exact: true, Entries: []DeviceEntry{e("mlx5_1", 0), e("mlx5_2", 0)}}},
		{in: "mlx5_0:0", bad: `port "0" of mlx5_0`},
		{in: "mlx5_0:x", bad: `port "x"`},
		{in: "mlx5_0:1:-1", bad: `GID index "-1"`},
		{in: ":1", bad: "empty device name"},
		{in: "a:1:2:3", bad: `"a:1:2:3"`},
		{in: "mlx5_0,,mlx5_1", bad: "empty device name"},
		{in: "^", bad: "no device named"},
		{in: "=", bad: "no device named"},
		{in: "^mlx5_0:1", bad: "without a port"},
		{in: "=^mlx5_0", bad: "go before the list, in that order"}, // "^" goes first, as in NCCL
	} {
		got, err := ParseDevices(tc.in)
		if tc.bad != "" {
			assert.ErrorIs(t, err, verbs.ErrInvalidArgument, tc.in)
			assert.ErrorContains(t, err, tc.bad, tc.in)
			assert.ErrorContains(t, err, fmt.Sprintf("%q", tc.in), "the error quotes the input")
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
		assert.Equal(t, tc.in, got.String(), "String writes the input back")
	}
	_, err := Open(context.Background(), verbs.DeviceOptions{}, Options{Port: 300})
	assert.ErrorIs(t, err, verbs.ErrInvalidArgument)
	_, err = Open(context.Background(), verbs.DeviceOptions{}, Options{GID: GIDIndex(-2)})
	assert.ErrorIs(t, err, verbs.ErrInvalidArgument)
	_, err = Open(context.Background(), verbs.DeviceOptions{Name: "mlx5_0:1,"}, Options{})
	assert.ErrorIs(t, err, verbs.ErrInvalidArgument, "a malformed selection is refused before any device is looked at")
}

func TestSelectDevices(t *testing.T) {
	present := []string{"mlx5_0", "mlx5_1", "mlx5_10", "rxe0", "rxe1", "rxe2"}
	names := func(es []DeviceEntry) []string {
		var out []string
		for _, e := range es {
			s := e.Name
			if e.Port != 0 {
				s += fmt.Sprintf(":%d", e.Port)
			}
			if i, ok := e.GID.Index(); ok {
				s += fmt.Sprintf(":%d", i)
			}
			out = append(out, s)
		}
		return out
	}
	for _, tc := range []struct {
		spec string
		want []string
	}{
		{"", present},
		{"rxe1", []string{"rxe1"}},
		{"mlx5_1", []string{"mlx5_1", "mlx5_10"}}, // a prefix, as in NCCL
		{"=mlx5_1", []string{"mlx5_1"}},
		{"mlx5", []string{"mlx5_0", "mlx5_1", "mlx5_10"}},
		{"rxe2,mlx5_0:1", []string{"rxe2", "mlx5_0:1"}}, // the order given
		{"rxe1:1:3", []string{"rxe1:1:3"}},              // port and GID carried
		{"rxe1,rxe", []string{"rxe1", "rxe0", "rxe2"}},  // each device once
		{"^mlx5", []string{"rxe0", "rxe1", "rxe2"}},     // exclusion
		{"^=mlx5_1,rxe0", []string{"mlx5_0", "mlx5_10", "rxe1", "rxe2"}},
	} {
		spec, err := ParseDevices(tc.spec)
		require.NoError(t, err, tc.spec)
		got, err := spec.Select(present)
		require.NoError(t, err, tc.spec)
		assert.Equal(t, tc.want, names(got), tc.spec)
	}

	for _, spec := range []string{"mlx4_0", "=mlx5", "^rxe,mlx5"} {
		s, err := ParseDevices(spec)
		require.NoError(t, err)
		_, err = s.Select(present)
		assert.ErrorIs(t, err, verbs.ErrUnavailable, spec)
		assert.ErrorContains(t, err, fmt.Sprintf("no RDMA device matches %q", spec))
		assert.ErrorContains(t, err, "(have mlx5_0, mlx5_1, mlx5_10, rxe0, rxe1, rxe2)", "the error lists the devices present")
	}
	_, err := DeviceSpec{}.Select(nil)
	assert.ErrorIs(t, err, verbs.ErrUnavailable)
	assert.ErrorContains(t, err, "no RDMA devices")

	// Options' port and GID win over the entries'.
	spec, err := ParseDevices("rxe1:1:3,rxe2")
	require.NoError(t, err)
	got, err := selector{spec: spec, opts: Options{Port: 2, GID: GIDIndex(5)}}.candidates(present)
	require.NoError(t, err)
	assert.Equal(t, []string{"rxe1:2:5", "rxe2:2:5"}, names(got))
	got, err = selector{spec: spec}.candidates(present)
	require.NoError(t, err)
	assert.Equal(t, []string{"rxe1:1:3", "rxe2"}, names(got))
}

func gid(s string) [16]byte { return netip.MustParseAddr(s).As16() }

func TestChooseGID(t *testing.T) {
	// A typical RoCE port: index 0/1 link-local v1/v2, 2/3 IPv4 v1/v2, 4/5 global IPv6 v1/v2.
	roce := []GIDEntry{
		{0, GIDTypeRoCEv1, gid("fe80::1")}, {1, GIDTypeRoCEv2, gid("fe80::1")},
		{2, GIDTypeRoCEv1, gid("::ffff:10.0.0.1")}, {3, GIDTypeRoCEv2, gid("::ffff:10.0.0.1")},
		{4, GIDTypeRoCEv1, gid("2001:db8::1")}, {5, GIDTypeRoCEv2, gid("2001:db8::1")},
	}
	e, err := chooseGID(roce, LinkEthernet, AutoGID)
	require.NoError(t, err)
	assert.Equal(t, 3, e.Index)
	e, err = chooseGID(roce[:2], LinkEthernet, AutoGID)
	require.NoError(t, err)
	assert.Equal(t, 1, e.Index, "link-local RoCE v2 beats v1")
	e, err = chooseGID(append(roce[:1:1], roce[4:]...), LinkEthernet, AutoGID)
	require.NoError(t, err)
	assert.Equal(t, 5, e.Index, "global IPv6 v2")
	e, err = chooseGID(roce[:1], LinkEthernet, AutoGID)
	require.NoError(t, err)
	assert.Equal(t, 0, e.Index, "RoCE v1 only as a last resort")
	e, err = chooseGID(roce, LinkEthernet, GIDIndex(4))
	require.NoError(t, err)
	assert.Equal(t, 4, e.Index)
	_, err = chooseGID(roce, LinkEthernet, GIDIndex(9))
	assert.ErrorIs(t, err, verbs.ErrInvalidArgument)
	assert.ErrorContains(t, err, "GID index 9")
	_, err = chooseGID(nil, LinkEthernet, AutoGID)
	assert.ErrorIs(t, err, verbs.ErrUnavailable)

	ib := []GIDEntry{{0, GIDTypeIB, gid("fe80::2:c903:a:1")}, {1, GIDTypeIB, gid("fe80::2:c903:a:2")}}
	e, err = chooseGID(ib, LinkInfiniBand, AutoGID)
	require.NoError(t, err)
	assert.Equal(t, 0, e.Index)
}

func TestAddressRoundTrip(t *testing.T) {
	e := Endpoint{QPN: 0x11, PSN: 0xabcdef, LID: 7, GID: gid("::ffff:198.18.0.1"), MTU: verbs.MTU1024, LinkLayer: LinkEthernet}
	b, err := EncodeAddress(e)
	require.NoError(t, err)
	got, err := DecodeAddress(b)
	require.NoError(t, err)
	assert.Equal(t, e, got)
	for i := range b {
		_, err := DecodeAddress(b[:i])
		assert.ErrorIs(t, err, verbs.ErrInvalidArgument, "truncated at %d", i)
	}
	bad := append([]byte(nil), b...)
	bad[len(bad)-payloadLen] = 9 // version
	_, err = DecodeAddress(bad)
	assert.ErrorIs(t, err, verbs.ErrInvalidArgument)
	tcp, _ := verbs.QPAddress{Provider: "tcp", Payload: []byte("x")}.Encode()
	_, err = DecodeAddress(tcp)
	assert.ErrorIs(t, err, verbs.ErrInvalidArgument)
	_, err = EncodeAddress(Endpoint{PSN: 1 << 24})
	assert.ErrorIs(t, err, verbs.ErrInvalidArgument)
}

func FuzzDecodeAddress(f *testing.F) {
	b, _ := EncodeAddress(Endpoint{QPN: 1, PSN: 2, GID: gid("::ffff:1.2.3.4")})
	f.Add(b)
	f.Fuzz(func(t *testing.T, in []byte) {
		e, err := DecodeAddress(in)
		if err != nil {
			return
		}
		out, err := EncodeAddress(e)
		require.NoError(t, err)
		again, err := DecodeAddress(out)
		require.NoError(t, err)
		assert.Equal(t, e, again)
	})
}

func TestPathFor(t *testing.T) {
	peer := Endpoint{QPN: 5, GID: gid("::ffff:10.0.0.2"), MTU: verbs.MTU4096}
	p, err := pathFor(peer, LinkEthernet, verbs.MTU1024, verbs.MTU4096, 3)
	require.NoError(t, err)
	assert.True(t, p.isGlobal)
	assert.Equal(t, uint8(3), p.sgidIndex)
	assert.Equal(t, verbs.MTU1024, p.mtu, "clamped to the local active MTU")
	peer.MTU = verbs.MTU512
	p, err = pathFor(peer, LinkEthernet, verbs.MTU4096, verbs.MTU2048, 3)
	require.NoError(t, err)
	assert.Equal(t, verbs.MTU512, p.mtu, "clamped to the peer's active MTU")
	_, err = pathFor(Endpoint{QPN: 5}, LinkEthernet, 0, verbs.MTU1024, 3)
	assert.ErrorIs(t, err, verbs.ErrInvalidArgument, "RoCE without a GID")
	p, err = pathFor(Endpoint{QPN: 5, LID: 9}, LinkInfiniBand, 0, verbs.MTU1024, 0)
	require.NoError(t, err)
	assert.False(t, p.isGlobal, "IB with a LID needs no GRH")
	assert.Equal(t, uint16(9), p.dlid)
}

func TestStatusOf(t *testing.T) {
	for s := range uint32(30) {
		got := statusOf(s)
		switch s {
		case 3, 6, 14, 15, 16, 17, 18, 22, 23, 24, 25, 26, 27, 28, 29:
			assert.Equal(t, verbs.StatusGeneralErr, got, "ibv status %d", s)
		default:
			assert.Equal(t, verbs.Status(s), got, "ibv status %d", s)
		}
	}
	assert.Equal(t, verbs.StatusGeneralErr, statusOf(256+5))
	assert.Equal(t, 12.5e9, bandwidth(2, 32), "4x EDR: 4 lanes x 25 Gb/s")
	assert.Zero(t, bandwidth(0, 0))
	var se *verbs.StatusError
	wc := verbs.WC{Status: statusOf(12)}
	assert.True(t, errors.As(wc.Err(), &se))
}
