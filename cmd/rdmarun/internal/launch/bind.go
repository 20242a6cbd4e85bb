package launch

import (
	"fmt"

	"github.com/rdmago/rdmago/internal/affinity"
)

// bindSocket is what BindAuto gives more than two ranks of a host that has
// a CPU for each: every rank may run on the CPUs of one socket (sockets
// taken in turn), so the scheduler balances within a socket but never
// moves a rank away from its memory. It cannot be asked for by name.
const bindSocket BindPolicy = "socket"

// autoBind is the binding BindAuto gives the ranks of a host with
// localRanks ranks and cpus CPUs in rdmarun's affinity mask, the way
// Open MPI's defaults do: two ranks or fewer are pinned to a core each
// (a rank that stays on its core keeps its caches and is never moved
// away mid-message), more to a socket; ranks that outnumber the CPUs are
// left unbound, because pinning two of them to one CPU would make them
// take turns there while another CPU idles.
func autoBind(localRanks, cpus int) BindPolicy {
	switch {
	case cpus <= 0 || localRanks > cpus:
		return BindNone
	case localRanks <= 2:
		return BindCore
	default:
		return bindSocket
	}
}

// pinSet returns the CPUs a local rank is pinned to under policy (auto
// resolved), or nil for none: one CPU for core, the CPUs of its socket
// for socket (nil when that is every CPU: nothing to narrow).
func pinSet(policy BindPolicy, localRank int, cpus []int, sockets [][]int) []int {
	switch {
	case len(cpus) == 0:
		return nil
	case policy == BindCore:
		return []int{cpus[localRank%len(cpus)]}
	case policy == bindSocket && len(sockets) > 1:
		return sockets[localRank%len(sockets)]
	}
	return nil
}

// bindNote is what -v says about the binding of a host's ranks.
func bindNote(asked, policy BindPolicy, host string, localRanks, cpus int) string {
	switch {
	case policy == BindNone && asked == BindAuto:
		return fmt.Sprintf("%d ranks on %s outnumber its %d CPUs: ranks are not bound (--bind-to core pins them anyway)", localRanks, host, cpus)
	case policy == BindNone:
		return fmt.Sprintf("ranks on %s are not bound (--bind-to none)", host)
	case policy == BindCore:
		return fmt.Sprintf("each of the %d ranks on %s is bound to one of its %d CPUs (--bind-to none to leave them unbound)", localRanks, host, cpus)
	}
	return fmt.Sprintf("the %d ranks on %s are bound to a socket each (--bind-to none to leave them unbound)", localRanks, host)
}

// sockets lists the sockets of cpus when policy needs them.
func sockets(policy BindPolicy, cpus []int) [][]int {
	if policy != bindSocket {
		return nil
	}
	return affinity.Sockets(cpus)
}
