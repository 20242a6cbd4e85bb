package jobenv

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const token = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func good() map[string]string {
	return map[string]string{
		EnvRank: "2", EnvSize: "4", EnvLocalRank: "0", EnvLocalSize: "2",
		EnvAddr: "127.0.0.1:41234", EnvJob: "66939533abd3f657", EnvToken: token,
		EnvTransport: "auto", EnvTimeout: "2m0s",
	}
}

func lookup(m map[string]string) LookupEnv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestRdmarunGood(t *testing.T) {
	j, err := Detect(lookup(good()))
	require.NoError(t, err)
	assert.Equal(t, "rdmarun", j.Launcher)
	assert.Equal(t, 2, j.Rank)
	assert.Equal(t, 4, j.Size)
	assert.Equal(t, 0, j.LocalRank)
	assert.Equal(t, 2, j.LocalSize)
	assert.Equal(t, "127.0.0.1:41234", j.Addr)
	assert.Equal(t, "66939533abd3f657", j.JobID)
	assert.Len(t, j.Token, 32)
	assert.Equal(t, byte(0x9f), j.Token[0])
	assert.Equal(t, "auto", j.Transport)
	assert.Equal(t, 2*time.Minute, j.Timeout)
	assert.Equal(t, []string{EnvToken}, j.Secrets)

	m := good()
	m[EnvAddr] = "[fd00::1]:41234"
	m[EnvTransport] = "shm"
	m[EnvTimeout] = "1m30s"
	j, err = Detect(lookup(m))
	require.NoError(t, err)
	assert.Equal(t, "[fd00::1]:41234", j.Addr)
	assert.Equal(t, 90*time.Second, j.Timeout)
}

func TestRdmarunBad(t *testing.T) {
	for _, tc := range []struct {
		v, val string // val "-" unsets
		want   string // substrings of the error
	}{
		{EnvRank, "-", "RDMARUN_RANK is not set"},
		{EnvRank, "", `RDMARUN_RANK="": empty`},
		{EnvRank, "x", `RDMARUN_RANK="x": not a decimal integer`},
		{EnvRank, "-1", `RDMARUN_RANK="-1": not a decimal integer`},
		{EnvRank, "+1", `RDMARUN_RANK="+1"`},
		{EnvRank, " 1", `RDMARUN_RANK=" 1"`},
		{EnvRank, "4", `RDMARUN_RANK="4": out of range [0, 4) (RDMARUN_SIZE=4)`},
		{EnvRank, "99999999999999999999999", `too large`},
		{EnvSize, "0", `RDMARUN_SIZE="0": out of range 1..65536`},
		{EnvSize, "65537", `RDMARUN_SIZE="65537"`},
		{EnvSize, "four", `RDMARUN_SIZE="four"`},
		{EnvLocalSize, "0", `RDMARUN_LOCAL_SIZE="0": out of range 1..4`},
		{EnvLocalSize, "5", `RDMARUN_LOCAL_SIZE="5"`},
		{EnvLocalRank, "2", `RDMARUN_LOCAL_RANK="2": out of range [0, 2)`},
		{EnvLocalRank, "-", "RDMARUN_LOCAL_RANK is not set"},
		{EnvAddr, "localhost", `RDMARUN_ADDR="localhost": not host:port`},
		{EnvAddr, ":41234", `RDMARUN_ADDR=":41234": empty host`},
		{EnvAddr, "fd00::1:41234", `RDMARUN_ADDR="fd00::1:41234"`},
		{EnvAddr, "127.0.0.1:0", `port "0"`},
		{EnvAddr, "127.0.0.1:http", `port "http"`},
		{EnvJob, "", `RDMARUN_JOB="": want 1 to 64`},
		{EnvJob, "a b", `RDMARUN_JOB="a b"`},
		{EnvJob, strings.Repeat("a", 65), `RDMARUN_JOB=`},
		{EnvToken, "abc", `RDMARUN_TOKEN="<3 characters, not shown>": want 64 hex digits`},
		{EnvToken, strings.Repeat("zz", 32), `RDMARUN_TOKEN="<64 characters, not shown>"`},
		{EnvToken, token[:62], `<62 characters`},
		{EnvTransport, "rdma", `RDMARUN_TRANSPORT="rdma": want one of auto, shm, tcp, ibv`},
		{EnvTransport, "", `RDMARUN_TRANSPORT=""`},
		{EnvTimeout, "2", `RDMARUN_TIMEOUT="2": not a Go duration`},
		{EnvTimeout, "-1s", `RDMARUN_TIMEOUT="-1s": must be positive`},
		{EnvTimeout, "0s", `must be positive`},
	} {
		t.Run(tc.v+"="+tc.val, func(t *testing.T) {
			m := good()
			if tc.val == "-" {
				delete(m, tc.v)
			} else {
				m[tc.v] = tc.val
			}
			_, err := Detect(lookup(m))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.NotErrorIs(t, err, ErrNoLauncher)
			assert.Contains(t, err.Error(), tc.want)
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, "rdmarun", e.Launcher)
			assert.NotContains(t, err.Error(), token[:16], "the secret must never appear in an error")
		})
	}
}

func TestRdmarunSeveralMissing(t *testing.T) {
	_, err := Detect(lookup(map[string]string{EnvRank: "0", EnvSize: "1"}))
	require.ErrorIs(t, err, ErrInvalid)
	for _, v := range []string{EnvLocalRank, EnvLocalSize, EnvAddr, EnvJob, EnvToken, EnvTransport, EnvTimeout} {
		assert.Contains(t, err.Error(), v)
	}
	assert.Contains(t, err.Error(), "7 of the 9")
}

func TestNoLauncher(t *testing.T) {
	_, err := Detect(lookup(nil))
	require.ErrorIs(t, err, ErrNoLauncher)
	assert.NotErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "rdmarun -np")

	// Other launchers are comm/internal/launchers' to recognise: to
	// jobenv they are no rdmarun.
	_, err = Detect(lookup(map[string]string{"OMPI_COMM_WORLD_RANK": "0"}))
	require.ErrorIs(t, err, ErrNoLauncher)

	_, err = Detect(lookup(map[string]string{EnvAddr: "127.0.0.1:5", EnvToken: token}))
	require.ErrorIs(t, err, ErrNoLauncher, "shared variables alone are not rdmarun")
	assert.Contains(t, err.Error(), "RDMARUN_ADDR is set")
	assert.NotContains(t, err.Error(), token)

	_, err = Detect(lookup(map[string]string{"SLURM_PROCID": "0", "PMI_RANK": "0"}))
	require.ErrorIs(t, err, ErrNoLauncher)

	// rdmarun wins over anything it is nested in.
	m := good()
	m["SLURM_PROCID"] = "3"
	m["OMPI_COMM_WORLD_RANK"] = "1"
	j, err := Detect(lookup(m))
	require.NoError(t, err)
	assert.Equal(t, 2, j.Rank)
}

func TestErrorIs(t *testing.T) {
	err := error(&Error{Launcher: "x", Var: "V", Value: "v", Detail: "d"})
	assert.True(t, errors.Is(err, ErrInvalid))
	assert.Equal(t, `x: V="v": d`, err.Error())
}
