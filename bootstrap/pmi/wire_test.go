package pmi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse1(t *testing.T) {
	cases := []struct {
		line string
		cmd  string
		f    map[string]string
		err  string
	}{
		{"cmd=get_result rc=0 msg=success value=v1", "get_result", map[string]string{"rc": "0", "msg": "success", "value": "v1"}, ""},
		{"rc=0 cmd=barrier_out", "barrier_out", map[string]string{"rc": "0"}, ""},
		{"cmd=get_result  rc=1 ", "get_result", map[string]string{"rc": "1"}, ""},
		{"cmd=x value=", "x", map[string]string{"value": ""}, ""},
		{"cmd=x value=a=b", "x", map[string]string{"value": "a=b"}, ""},
		{"cmd=x\r", "x", map[string]string{}, ""},
		{"", "", nil, "no cmd"},
		{"rc=0", "", nil, "no cmd"},
		{"cmd=x junk", "", nil, "not key=value"},
		{"cmd=x =v", "", nil, "not key=value"},
		{"cmd=x a=1 a=2", "", nil, "twice"},
		{"cmd=x cmd=y", "", nil, "twice"},
	}
	for _, tc := range cases {
		m, err := parse1(tc.line)
		if tc.err != "" {
			require.Error(t, err, tc.line)
			assert.ErrorIs(t, err, errMalformed)
			assert.Contains(t, err.Error(), tc.err, tc.line)
			continue
		}
		require.NoError(t, err, tc.line)
		assert.Equal(t, tc.cmd, m.cmd, tc.line)
		assert.Equal(t, tc.f, m.fields, tc.line)
	}
}

func TestParse2(t *testing.T) {
	cases := []struct {
		p   string
		cmd string
		f   map[string]string
		err string
	}{
		{"cmd=kvs-get-response;rc=0;found=TRUE;value=v1;", "kvs-get-response", map[string]string{"rc": "0", "found": "TRUE", "value": "v1"}, ""},
		{"cmd=x;value=a;;b;;;", "x", map[string]string{"value": "a;b;"}, ""},
		{"cmd=x;value=", "x", map[string]string{"value": ""}, ""},
		{"rc=0;cmd=y", "y", map[string]string{"rc": "0"}, ""},
		{"", "", nil, "no cmd"},
		{"cmd=x;junk", "", nil, "not key=value"},
		{"cmd=x;a;b=c;", "", nil, "not key=value"},
		{"cmd=x;a=1;a=2;", "", nil, "twice"},
	}
	for _, tc := range cases {
		m, err := parse2(tc.p)
		if tc.err != "" {
			require.Error(t, err, tc.p)
			assert.Contains(t, err.Error(), tc.err, tc.p)
			continue
		}
		require.NoError(t, err, tc.p)
		assert.Equal(t, tc.cmd, m.cmd)
		assert.Equal(t, tc.f, m.fields)
	}
}

func TestFormat(t *testing.T) {
	assert.Equal(t, "cmd=put kvsname=k key=a value=b\n", format1("put", "kvsname", "k", "key", "a", "value", "b"))
	// The exact bytes Slurm's plugin was seen to accept (launchers.md).
	assert.Equal(t, "28    cmd=kvs-put;key=k0;value=v0;", format2("kvs-put", "key", "k0", "value", "v0"))
	assert.Equal(t, "14    cmd=kvs-fence;", format2("kvs-fence"))
	m, err := parse2(format2("x", "v", "a;b")[6:])
	require.NoError(t, err)
	assert.Equal(t, "a;b", m.fields["v"])

	p, n, ok, err := frame2([]byte("14    cmd=kvs-fence;rest"))
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 20, n)
	assert.Equal(t, "cmd=kvs-fence;", p)
	_, _, ok, err = frame2([]byte("14    cmd=kvs"))
	require.NoError(t, err)
	assert.False(t, ok)
	_, _, _, err = frame2([]byte("-1    "))
	assert.Error(t, err)
	_, _, _, err = frame2([]byte("999999"))
	assert.Error(t, err)
}

// The parsers never panic, and what they accept round-trips.
func FuzzParse1(f *testing.F) {
	for _, s := range []string{"cmd=get_result rc=0 msg=success value=v1", "rc=0 cmd=barrier_out", "cmd=x value=a=b", "=", "cmd= =", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parse1(s)
		if err != nil {
			return
		}
		var kv []string
		for k, v := range m.fields {
			kv = append(kv, k, v)
		}
		line := format1(m.cmd, kv...)
		m2, err := parse1(line[:len(line)-1])
		if err != nil {
			// Values with spaces cannot be written back; they cannot be
			// parsed either, so accepted values never contain them.
			t.Fatalf("re-parse of %q: %v", line, err)
		}
		if m2.cmd != m.cmd || len(m2.fields) != len(m.fields) {
			t.Fatalf("round trip %q -> %q", s, line)
		}
	})
}

func FuzzParse2(f *testing.F) {
	for _, s := range []string{"cmd=kvs-get-response;rc=0;found=TRUE;value=v1;", "cmd=x;value=a;;b;;;", ";;", "=;", "cmd=;"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parse2(s)
		if err != nil {
			return
		}
		var kv []string
		for k, v := range m.fields {
			kv = append(kv, k, v)
		}
		out := format2(m.cmd, kv...)
		if _, _, ok, err := frame2([]byte(out)); err != nil || !ok {
			if len(out)-6 <= maxMsg {
				t.Fatalf("frame of %q: %v", out, err)
			}
			return
		}
		m2, err := parse2(out[6:])
		if err != nil {
			t.Fatalf("re-parse of %q: %v", out, err)
		}
		if m2.cmd != m.cmd || len(m2.fields) != len(m.fields) {
			t.Fatalf("round trip %q -> %q", s, out)
		}
		for k, v := range m.fields {
			if m2.fields[k] != v {
				t.Fatalf("field %q: %q -> %q", k, v, m2.fields[k])
			}
		}
	})
}

func FuzzFrame2(f *testing.F) {
	f.Add([]byte("14    cmd=kvs-fence;"))
	f.Add([]byte("0     "))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, n, ok, err := frame2(b)
		if err != nil || !ok {
			return
		}
		if n != 6+len(p) || n > len(b) {
			t.Fatalf("frame %q: n=%d payload %q", b, n, p)
		}
	})
}

// Hydra pads the PMI-2 length on the left ("   113"), Slurm on the right.
func TestFrame2Padding(t *testing.T) {
	for _, head := range []string{"14    ", "    14", "  14  "} {
		p, _, ok, err := frame2([]byte(head + "cmd=kvs-fence;"))
		require.NoError(t, err, head)
		assert.True(t, ok)
		assert.Equal(t, "cmd=kvs-fence;", p)
	}
}
