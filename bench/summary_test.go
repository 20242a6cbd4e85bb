package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// osuCompareTable is a table as osu-compare prints it.
const osuCompareTable = `# 7 alternating rounds; ratio = A/B (lower is better for A)
#       Size     A median     B median   ratio   ratio min-max
           4        0.290        0.190    1.29    0.98-2.62
         128        0.330        0.230    1.27    1.05-1.74
        2048       13.680        9.470    1.17    1.06-1.73
       65536       30.730       56.930    0.56    0.45-0.62
     1048576      170.230      435.670    0.39    0.27-0.46
worst median ratio 1.29
`

// summaryLine runs bench/summary.awk, as compare.sh and cross-host.sh do,
// on table.
func summaryLine(t *testing.T, name, mode, table string) string {
	t.Helper()
	awk, err := exec.LookPath("awk")
	if err != nil {
		t.Skip("no awk here")
	}
	f := filepath.Join(t.TempDir(), "row.txt")
	require.NoError(t, os.WriteFile(f, []byte(table), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, awk, "-v", "name="+name, "-v", "mode="+mode, "-f", "summary.awk", f).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.TrimSpace(string(out))
}

func TestSummaryNamesSizesBehindInEveryRound(t *testing.T) {
	for _, tc := range []struct {
		name, mode, table string
		want              []string
	}{
		{
			name: "times", mode: "time", table: osuCompareTable,
			want: []string{
				"worst 1.29 at 4 (rounds 0.98-2.62), best 0.39 |",
				"<1K 1.29 1K-64K 1.17 64K-1M 0.56 >=1M 0.39 |",
				// 4 B has a round ahead (0.98): not listed.
				"behind in every round: 128 (1.27, 1.05-1.74) 2048 (1.17, 1.06-1.73)",
			},
		},
		{
			name: "bandwidths", mode: "bw", table: `#       Size     A median     B median   ratio   ratio min-max
           8     9.0     10.0    0.90    0.80-0.99
          64    12.0     11.0    1.09    0.95-1.20
`,
			want: []string{
				"worst 0.90 at 8 (rounds 0.80-0.99), best 1.09 |",
				"<1K 0.90 |",
				"behind in every round: 8 (0.90, 0.80-0.99)",
			},
		},
		{
			name: "none behind", mode: "time", table: `       16    1.0    1.0    1.02    0.97-1.10
`,
			want: []string{"worst 1.02 at 16", "behind in every round: none"},
		},
		{
			name: "empty", mode: "time", table: "# nothing ran\n",
			want: []string{"no rows"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := summaryLine(t, "row-np2", tc.mode, tc.table)
			require.True(t, strings.HasPrefix(line, "row-np2 "), line)
			for _, w := range tc.want {
				require.Contains(t, line, w)
			}
		})
	}
}
