package launch

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/rdmago/rdmago/internal/slurm"
)

// Inside a Slurm allocation (SLURM_JOB_ID set) and without --host or
// --hostfile, rdmarun places ranks on the allocation's nodes and starts
// each with its own one-task job step, through this launch agent: srun is
// how an allocation's nodes are reached (ssh to them may well be
// forbidden), and it puts the ranks under Slurm's accounting and cleanup.
// Every node is reached through srun, this one included, so that the
// ranks run inside the allocation. --overlap lets the one-task steps share
// the allocation's CPUs; --mpi=none keeps a site's MpiDefault from giving
// them a PMI service (they use rdmarun's rendezvous); --quiet drops srun's
// progress lines. The rank's environment, token and control stream travel
// as with any exec-style agent: environment and script from rdmarun,
// token on stdin (srun forwards stdin to its one task).
const slurmAgent = "srun --quiet --mpi=none --overlap --nodes=1 --ntasks=1 --nodelist={host}"

// slurmHosts returns the allocation's nodes with their slots: the tasks
// per node (SLURM_TASKS_PER_NODE) when the allocation was made with -n
// (SLURM_NTASKS set), else the CPUs per node (SLURM_JOB_CPUS_PER_NODE).
func slurmHosts(ctx context.Context, getenv func(string) (string, bool)) ([]Host, error) {
	get := func(k string) string { v, _ := getenv(k); return v }
	id := get("SLURM_JOB_ID")
	origin := "Slurm allocation " + id
	nodelist := get("SLURM_JOB_NODELIST")
	if nodelist == "" {
		nodelist = get("SLURM_NODELIST")
	}
	if nodelist == "" {
		return nil, fmt.Errorf("inside %s, but SLURM_JOB_NODELIST is not set (use --host, or --no-srun)", origin)
	}
	var names []string
	if strings.ContainsAny(nodelist, "[,") {
		// Only Slurm knows all of its host-list syntax.
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := exec.CommandContext(cctx, "scontrol", "show", "hostnames", nodelist).Output()
		cancel()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%v: %s", err, strings.TrimSpace(string(ee.Stderr)))
			}
			return nil, fmt.Errorf("scontrol show hostnames %s (the nodes of %s): %v", nodelist, origin, err)
		}
		names = strings.Fields(string(out))
	} else {
		names = []string{nodelist}
	}
	// Tasks when the allocation asked for them (-n sets SLURM_NTASKS);
	// else Slurm reports one task per node, and the CPUs are what the
	// allocation really holds (salloc -N 2 --exclusive).
	counts, from := get("SLURM_JOB_CPUS_PER_NODE"), "SLURM_JOB_CPUS_PER_NODE"
	if _, ok := getenv("SLURM_NTASKS"); ok || counts == "" {
		counts, from = get("SLURM_TASKS_PER_NODE"), "SLURM_TASKS_PER_NODE"
	}
	slots, err := slurm.Counts(counts, 1<<16)
	if err != nil {
		return nil, fmt.Errorf("%s=%q (in %s): %v", from, counts, origin, err)
	}
	if len(slots) != len(names) {
		return nil, fmt.Errorf("%s=%q gives %d nodes, SLURM_JOB_NODELIST=%q %d (in %s)", from, counts, len(slots), nodelist, len(names), origin)
	}
	hosts := make([]Host, len(names))
	for i, n := range names {
		hosts[i] = Host{Name: n, Slots: slots[i], Origin: origin}
	}
	return hosts, nil
}
