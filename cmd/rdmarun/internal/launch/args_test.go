package launch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseArgs(t *testing.T) {
	env := func(k string) (string, bool) {
		if k == "HOME" {
			return "/home/u", true
		}
		return "", false
	}
	tests := []struct {
		name string
		argv []string
		want func(*Args)
		err  string
	}{
		{name: "minimal", argv: []string{"-np", "4", "./prog"}, want: func(a *Args) {
			a.NP, a.Program = 4, "./prog"
		}},
		{name: "equals and double dash", argv: []string{"--np=2", "--tag-output", "prog", "a", "-np", "9"}, want: func(a *Args) {
			a.NP, a.TagOutput, a.Program, a.ProgramArgs = 2, true, "prog", []string{"a", "-np", "9"}
		}},
		{name: "-n alias and --", argv: []string{"-n", "3", "--", "-weird-prog", "x"}, want: func(a *Args) {
			a.NP, a.Program, a.ProgramArgs = 3, "-weird-prog", []string{"x"}
		}},
		{name: "everything", argv: []string{"-np", "8", "--host", "a:2,b:2", "-H", "c", "-x", "FOO=bar", "-x", "HOME",
			"-x", "FOO=baz", "--wdir", "/tmp", "--oversubscribe", "--bind-to", "core", "--timeout", "90",
			"--connect-timeout", "30s", "--grace", "0.5", "--transport", "tcp", "--launch-agent", "ip netns exec {host}",
			"--iface", "^lo", "-v", "--stdin", "none", "prog"}, want: func(a *Args) {
			a.NP = 8
			a.HostLists = []string{"a:2,b:2", "c"}
			a.Env = []EnvVar{{"FOO", "baz"}, {"HOME", "/home/u"}}
			a.WorkDir, a.Oversubscribe, a.BindTo = "/tmp", true, BindCore
			a.Timeout, a.ConnectTimeout, a.Grace = 90*time.Second, 30*time.Second, 500*time.Millisecond
			a.Transport, a.LaunchAgent, a.Iface, a.Verbose, a.NoStdin = "tcp", "ip netns exec {host}", "^lo", true, true
			a.Program = "prog"
		}},
		{name: "Open MPI's overload-allowed", argv: []string{"-np", "4", "--oversubscribe", "--bind-to", "core:overload-allowed", "p"}, want: func(a *Args) {
			a.NP, a.Oversubscribe, a.BindTo, a.Program = 4, true, BindCore, "p"
		}},
		{name: "hostfile", argv: []string{"-np", "1", "--hostfile", "hf", "p"}, want: func(a *Args) {
			a.NP, a.Hostfile, a.Program = 1, "hf", "p"
		}},
		{name: "no np", argv: []string{"prog"}, err: "missing -np N"},
		{name: "no program", argv: []string{"-np", "2"}, err: "missing PROGRAM"},
		{name: "np needs value", argv: []string{"-np"}, err: "option -np needs a value"},
		{name: "np zero", argv: []string{"-np", "0", "p"}, err: `-np "0": want a positive number of ranks`},
		{name: "np huge", argv: []string{"-np", "100000000", "p"}, err: "-np 100000000: at most 65536 ranks"},
		{name: "np word", argv: []string{"-np", "four", "p"}, err: `-np "four": want a positive number of ranks`},
		{name: "np twice", argv: []string{"-np", "2", "-n", "3", "p"}, err: "option -n given twice"},
		{name: "unknown option", argv: []string{"-np", "2", "--frobnicate", "p"}, err: "unknown option --frobnicate"},
		{name: "flag with value", argv: []string{"-np", "2", "--oversubscribe=yes", "p"}, err: "option --oversubscribe takes no value"},
		{name: "-x unset", argv: []string{"-np", "2", "-x", "NOPE", "p"}, err: "-x NOPE: NOPE is not set in rdmarun's environment"},
		{name: "-x bad name", argv: []string{"-np", "2", "-x", "1X=2", "p"}, err: `-x "1X=2": "1X" is not a valid environment variable name`},
		{name: "-x reserved", argv: []string{"-np", "2", "-x", "RDMARUN_RANK=3", "p"}, err: "RDMARUN_* variables are set by rdmarun"},
		{name: "bind-to", argv: []string{"-np", "2", "--bind-to", "socket", "p"}, err: `--bind-to "socket": want auto, core or none`},
		{name: "bind-to other qualifier", argv: []string{"-np", "2", "--bind-to", "core:if-supported", "p"}, err: `--bind-to "core:if-supported": the only qualifier taken is core:overload-allowed`},
		{name: "bind-to qualifier on none", argv: []string{"-np", "2", "--bind-to", "none:overload-allowed", "p"}, err: "the only qualifier taken is core:overload-allowed"},
		{name: "bind-to bad base with qualifier", argv: []string{"-np", "2", "--bind-to", "socket:overload-allowed", "p"}, err: "want auto, core or none"},
		{name: "transport", argv: []string{"-np", "2", "--transport", "udp", "p"}, err: `--transport "udp": want one of auto, shm, tcp, ibv`},
		{name: "timeout", argv: []string{"-np", "2", "--timeout", "soon", "p"}, err: `--timeout "soon": not a duration`},
		{name: "timeout zero", argv: []string{"-np", "2", "--timeout", "0", "p"}, err: "want a positive duration"},
		{name: "agent quote", argv: []string{"-np", "2", "--launch-agent", "ssh 'x", "p"}, err: "unclosed '"},
		{name: "host and hostfile", argv: []string{"-np", "2", "--host", "a", "--hostfile", "f", "p"}, err: "either --host or --hostfile"},
		{name: "empty host", argv: []string{"-np", "2", "--host", " ", "p"}, err: "empty host list"},
		{name: "stdin", argv: []string{"-np", "2", "--stdin", "all", "p"}, err: `--stdin "all": want 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArgs(tt.argv, env)
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				assert.True(t, IsUsage(err), "a command-line mistake is a usage error")
				return
			}
			require.NoError(t, err)
			want := &Args{BindTo: BindAuto, Transport: "auto", Grace: DefaultGrace, ConnectTimeout: DefaultConnectTimeout, ProgramArgs: []string{}}
			tt.want(want)
			assert.Equal(t, want, got)
		})
	}
}

func TestParseArgsHelp(t *testing.T) {
	_, err := ParseArgs([]string{"--help"}, nil)
	assert.ErrorIs(t, err, ErrHelp)
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"90": 90 * time.Second, "1.5": 1500 * time.Millisecond, "2m": 2 * time.Minute, "1m30s": 90 * time.Second} {
		got, err := ParseDuration(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "-1", "-5s", "x", "1e12"} {
		_, err := ParseDuration(in)
		assert.Error(t, err, in)
	}
}
