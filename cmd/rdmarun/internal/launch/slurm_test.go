package launch

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSlurmHosts(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		m := map[string]string{}
		for _, s := range kv {
			k, v, _ := strings.Cut(s, "=")
			m[k] = v
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	hs, err := slurmHosts(context.Background(), env("SLURM_JOB_ID=5", "SLURM_JOB_NODELIST=n1", "SLURM_NTASKS=4", "SLURM_TASKS_PER_NODE=4", "SLURM_JOB_CPUS_PER_NODE=8"))
	require.NoError(t, err)
	assert.Equal(t, []Host{{Name: "n1", Slots: 4, Origin: "Slurm allocation 5"}}, hs)
	hs, err = slurmHosts(context.Background(), env("SLURM_JOB_ID=5", "SLURM_JOB_NODELIST=n1", "SLURM_TASKS_PER_NODE=1", "SLURM_JOB_CPUS_PER_NODE=8"))
	require.NoError(t, err)
	assert.Equal(t, 8, hs[0].Slots, "without -n, the CPUs are the slots")

	_, err = slurmHosts(context.Background(), env("SLURM_JOB_ID=5"))
	assert.ErrorContains(t, err, "SLURM_JOB_NODELIST is not set")
	_, err = slurmHosts(context.Background(), env("SLURM_JOB_ID=5", "SLURM_JOB_NODELIST=n1", "SLURM_NTASKS=4", "SLURM_TASKS_PER_NODE=2(x2)"))
	assert.ErrorContains(t, err, "gives 2 nodes")
	_, err = slurmHosts(context.Background(), env("SLURM_JOB_ID=5", "SLURM_JOB_NODELIST=n1", "SLURM_NTASKS=4", "SLURM_TASKS_PER_NODE=many"))
	assert.ErrorContains(t, err, `SLURM_TASKS_PER_NODE="many" (in Slurm allocation 5)`)
}

func TestParseNoSrun(t *testing.T) {
	a, err := ParseArgs([]string{"--no-srun", "-np", "2", "prog"}, nil)
	require.NoError(t, err)
	assert.True(t, a.NoSrun)
}
