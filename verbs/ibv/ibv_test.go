package ibv

import (
	"context"
	"errors"
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

func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want selection
		bad  bool
	}{
		{in: "", want: selection{}},
		{in: "rxe0", want: selection{name: "rxe0"}},
		{in: "mlx5_0:2", want: selection{name: "mlx5_0", port: 2}},
		{in: "mlx5_0:1:3", want: selection{name: "mlx5_0", port: 1, gid: GIDIndex(3)}},
		{in: "mlx5_0:0", bad: true},
		{in: "mlx5_0:x", bad: true},
		{in: "mlx5_0:1:-1", bad: true},
		{in: ":1", bad: true},
		{in: "a:1:2:3", bad: true},
	} {
		got, err := parseName(tc.in)
		if tc.bad {
			assert.ErrorIs(t, err, verbs.ErrInvalidArgument, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	_, err := Open(context.Background(), verbs.DeviceOptions{}, Options{Port: 300})
	assert.ErrorIs(t, err, verbs.ErrInvalidArgument)
	_, err = Open(context.Background(), verbs.DeviceOptions{}, Options{GID: GIDIndex(-2)})
	assert.ErrorIs(t, err, verbs.ErrInvalidArgument)
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
