package p2p

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	_ "github.com/rdmago/rdmago/verbs/loop"
)

func TestRegCache(t *testing.T) {
	dev, err := verbs.Open(context.Background(), "loop", verbs.DeviceOptions{})
	require.NoError(t, err)
	defer dev.Close()
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	defer pd.Close()
	c := newRegCache(pd, verbs.AccessLocalWrite|verbs.AccessRemoteRead, 2, 1<<20)
	defer c.close()

	a := make([]byte, 4096)
	e1, err := c.get(a)
	require.NoError(t, err)
	// The same buffer, and a slice inside it, hit the entry.
	e2, err := c.get(a)
	require.NoError(t, err)
	require.Same(t, e1, e2)
	e3, err := c.get(a[100:200])
	require.NoError(t, err)
	require.Same(t, e1, e3)
	require.Equal(t, e1.mr.Addr()+100, e3.addr(a[100:200]))
	// A buffer that only overlaps (here: longer than the entry) misses.
	big := make([]byte, 8192)
	e4, err := c.get(big)
	require.NoError(t, err)
	require.NotSame(t, e1, e4)
	_, _, hits, misses := c.stats()
	require.Equal(t, uint64(2), hits)
	require.Equal(t, uint64(2), misses)

	// Entries in use are never evicted, even beyond maxEntries.
	other := make([]byte, 100)
	e5, err := c.get(other)
	require.NoError(t, err)
	n, _, _, _ := c.stats()
	require.Equal(t, 3, n)
	// Released entries go, least recently used first: e1 was used before e4.
	c.put(e1)
	c.put(e2)
	c.put(e3)
	n, _, _, _ = c.stats()
	require.Equal(t, 2, n, "e1 unused and over the limit: evicted")
	c.put(e4)
	c.put(e5)
	n, _, _, _ = c.stats()
	require.Equal(t, 2, n)
	// The entry keeps the memory it registered: it holds the slice itself.
	e6, err := c.get(other)
	require.NoError(t, err)
	require.Same(t, e5, e6)
	require.Equal(t, addrOf(other), addrOf(e6.buf))
	c.put(e6)

	// Byte budget: a registration larger than maxBytes is evicted as soon as it is released.
	huge := make([]byte, 2<<20)
	e7, err := c.get(huge)
	require.NoError(t, err)
	c.put(e7)
	for _, e := range c.lru {
		require.NotSame(t, e7, e)
	}
}
