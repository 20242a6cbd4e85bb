#!/bin/sh
# cross-host.sh [OUTDIR]: rdmabench beside Open MPI across hosts, on a cluster of
# network namespaces with host names of their own on this machine
# (cmd/rdmacluster, docs/cluster.md). As compare.sh does, every comparison
# alternates the two commands for $ROUNDS rounds with osu-compare (median of
# per-round ratios, A = rdmago, B = Open MPI) and saves its table in
# OUTDIR/NAME.txt, and a line per row in OUTDIR/summary.txt (as compare.sh
# writes: bench/summary.awk, after a note of how long a cache line took
# between CPUs 0 and 1 before the row and after); MPICH runs once per row
# beside them, report only (OUTDIR/NAME.mpich.txt).
#
#   sudo sh bench/cross-host.sh /tmp/xhost                     # everything
#   ROUNDS=1 SHAPES=none LAYOUTS=2x1 ONLY="latency allreduce" sudo sh bench/cross-host.sh /tmp/try
#   TCP_CC=reno SHAPES=none sudo sh bench/cross-host.sh /tmp/reno    # both libraries on reno (see TCP_CC below)
#
# Rows: latency and bw (ranks 0 and 1, on two hosts: 2x1 only), allreduce,
# bcast, reduce, allgather, reduce_scatter, alltoall and barrier at
# LAYOUTS (hosts x ranks per host; default 2x1 2x2 4x2), for each of SHAPES
# (none: unshaped veth; a tc rate such as 10gbit: every host's link shaped
# to it both ways). Inside a host both libraries use shared memory, between
# hosts TCP (rdmago chooses shm/tcp per pair by itself; Open MPI gets
# vader,tcp). Both launchers start their ranks in the hosts through the
# same agent: rdmarun's --launch-agent, Open MPI's plm_rsh_agent and
# MPICH's rsh launcher (rdmacluster rsh).
#
# MPICH caveat: Debian's MPICH runs over UCX, whose shared-memory transports
# reach any process on the same kernel, network namespace or not, so its
# "cross-host" rows may be shared-memory figures (1 µs latencies say so);
# they are printed for reference only.
#
# Time: about ROUNDS x 2 x (sizes x 1.5 x BUDGET + 2 s start-up) per row,
# 23 rows per shape: with the defaults (5 rounds, 0.1 s, sizes to 1 MiB)
# about 45 s a row, 35 min per shape, 70 min for both, plus MPICH. On a
# 2-core machine 4x2 runs 8 ranks on 2 cores (oversubscribed, both sides).
#
# Needs root, iproute2, util-linux, openmpi-bin + libopenmpi-dev (mpicc), and
# for the MPICH column mpich + libmpich-dev.
set -eu
out=${1:-cross-host-results}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
MPIBENCH_SRC=${MPIBENCH_SRC:-$root/../shared/tools/mpibench/mpibench.c}
OSUCMP=${OSUCMP:-$root/../shared/tools/osu-compare}
ROUNDS=${ROUNDS:-5}
BUDGET=${BUDGET:-0.1} # seconds of timed loop per size, both sides
# Seconds of warm-up per size, both sides: mpibench's own default (its -w
# does not follow -t), which rdmabench would otherwise take as a fifth of
# its budget, 10 ms at BUDGET=0.05: a fifth of Open MPI's warm-up, where a
# crowded 4x2 job's first tens of calls of a size still run up to twice as
# slow as the rest.
WARM=${WARM:-0.05}
MAXC=${MAXC:-1048576} # largest collective size, bytes
SHAPES=${SHAPES:-none 10gbit}
LAYOUTS=${LAYOUTS:-2x1 2x2 4x2}
ONLY=${ONLY:-}     # benchmark names to run (default all)
MPICH=${MPICH:-1}  # 0: no MPICH column
# Open MPI's ranks poll while they wait; with more ranks than cores (auto)
# they yield instead, as Open MPI does by itself when it sees the
# oversubscription (the host list's slots hide it here). 1: always, 0: never.
# On a loaded machine polling costs Open MPI milliseconds per message.
OMPI_YIELD=${OMPI_YIELD:-auto}
# The TCP congestion control of every cluster host (its network namespace's
# net.ipv4.tcp_congestion_control), which both libraries' sockets get; empty
# leaves this machine's default. rdmago's connections between the hosts run
# reno whatever it is, since the hosts share this kernel
# (tcp.Options.LocalCongestion); TCP_CC=reno gives Open MPI the same, for a
# comparison of the protocols alone where the default is BBR.
TCP_CC=${TCP_CC:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

(cd "$root" && go build -o "$out/rdmabench" ./bench && go build -o "$out/rdmarun" ./cmd/rdmarun &&
	go build -o "$out/rdmacluster" ./cmd/rdmacluster)
mpicc.openmpi -O2 -o "$out/mpibench" "$MPIBENCH_SRC"
if [ "$MPICH" = 1 ] && command -v mpicc.mpich >/dev/null; then
	mpicc.mpich -O2 -o "$out/mpibench.mpich" "$MPIBENCH_SRC"
else
	MPICH=0
fi
# Each host gets CPUs of its own, as real hosts have: host i runs on CPU
# i mod (CPUs), set by taskset before the launcher or the ranks start, so
# that both launchers bind within it. Without this, each launcher binds
# the first rank of every host to CPU 0: two busy-polling ranks of two
# "hosts" then share one core, and a 0-byte latency reads 4 ms for Open
# MPI (a scheduler time slice) and 0.13 ms for rdmago (its 100 us poll)
# where a plain blocking TCP ping-pong between the namespaces takes 13 us
# (rdmarun's remote ranks also bind within the CPUs they are allowed).
# Open MPI gets --bind-to none: its own binding reads the whole machine's
# topology, not the CPUs the host was given, so by default it put the one
# rank of every 2x1 host on CPU 0 and spread the ranks of 2x2 and 4x2 over
# every CPU of the machine, where a real host's ranks stay on its own.
# Without binding, its ranks keep the host's CPUs, as rdmago's do.
# inhost HOST COMMAND...: run COMMAND in HOST on its CPUs; agent HOST
# WORDS...: the rsh-style agent both MPI launchers use.
ncpu=$(nproc)
printf '#!/bin/sh\nh=$1; shift\ni=${h##*-h}\nexec taskset -c $((i %% %s)) %s exec "$h" -- "$@"\n' "$ncpu" "$out/rdmacluster" >"$out/inhost"
printf '#!/bin/sh\nh=$1; shift\ni=${h##*-h}\nexec taskset -c $((i %% %s)) %s rsh "$h" "$@"\n' "$ncpu" "$out/rdmacluster" >"$out/agent"
chmod +x "$out/agent" "$out/inhost"

C="$out/rdmacluster"
prefix=rdx$$
subnet=198.18.200.0/24
agent="$out/inhost {host}"
trap '"$C" down $prefix >/dev/null 2>&1 || true' EXIT
trap 'exit 130' INT TERM HUP

ompi=$(mpirun.openmpi --version 2>/dev/null | head -1 | sed 's/.*) //')
kmax=$((MAXC / 1024))K
: >"$out/summary.txt"
echo "# cross-host.sh at $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown), $ROUNDS rounds, load: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/summary.txt"

# retry CMD: as in compare.sh, up to 3 runs, the first that succeeds.
retry() {
	printf 'for i in 1 2 3; do o=$(%s) && { printf "%%s\\n" "$o"; exit 0; }; echo "cross-host.sh: retrying after a failed run" >&2; done; exit 1' "$1"
}

# linelat: how many ns a cache line takes between CPUs 0 and 1 now, where
# hosts 0 and 1 run (rdmabench linelat), "?" if it cannot tell.
linelat() {
	n=$("$out/rdmabench" linelat 2>/dev/null | sed -n 's/.*CPU 1: \([0-9]*\) ns.*/\1/p')
	echo "${n:-?}"
}

hostlist() { # HOSTS SLOTS
	i=0 l=""
	while [ $i -lt "$1" ]; do
		l="$l${l:+,}$prefix-h$i:$2"
		i=$((i + 1))
	done
	echo "$l"
}

row() { # NAME MODE RDMABENCH_ARGS MPIBENCH_ARGS HOSTS SLOTS SHAPE
	name=$1 mode=$2 rargs=$3 margs=$4 h=$5 s=$6 shape=$7
	np=$((h * s))
	list=$(hostlist "$h" "$s")
	file="$out/$1-${h}x$s-$shape"
	# More ranks than cores: Open MPI yields when idle, as it does by itself
	# when it sees the oversubscription (the host list hides it here).
	yield=""
	case $OMPI_YIELD in
	1) yield="--mca mpi_yield_when_idle 1" ;;
	auto) [ "$np" -gt "$(nproc)" ] && yield="--mca mpi_yield_when_idle 1" ;;
	esac
	a="$out/inhost $prefix-h0 $out/rdmarun --stdin none --oversubscribe -np $np --host $list --launch-agent '$agent' --iface $subnet $out/rdmabench $rargs -q --budget ${BUDGET}s --warmup-budget ${WARM}s"
	b="$out/inhost $prefix-h0 mpirun.openmpi --oversubscribe -np $np --host $list --mca plm_rsh_agent $out/agent --mca oob_tcp_if_include $subnet --mca btl_tcp_if_include $subnet --mca btl self,vader,tcp --bind-to none $yield $out/mpibench $margs -t $BUDGET -w $WARM"
	echo "## $name ${h}x$s $shape ($(uptime | sed 's/.*load/load/'))"
	echo "A: $a"
	echo "B: $b"
	# How far apart the vCPUs sit moves the small calls of both libraries
	# (docs/benchmarks.md): noted before the row and after, as compare.sh
	# does.
	before=$(linelat)
	"$OSUCMP" --rounds "$ROUNDS" --mode "$mode" --a "$(retry "$a")" --b "$b" | tee "$file.txt"
	echo "# $name-${h}x$s-$shape: line CPU 0 - CPU 1: $before ns one way before the row, $(linelat) ns after" | tee -a "$out/summary.txt"
	awk -v name="$name-${h}x$s-$shape" -v mode="$mode" -f "$root/bench/summary.awk" "$file.txt" >>"$out/summary.txt"
	if [ "$MPICH" = 1 ]; then
		hl=$(echo "$list" | sed 's/:[0-9]*//g')
		m="$out/inhost $prefix-h0 mpirun.mpich -np $np -ppn $s -hosts $hl -launcher rsh -launcher-exec $out/agent -iface eth0 $out/mpibench.mpich $margs -t $BUDGET -w $WARM"
		echo "MPICH (report only): $m"
		sh -c "$m" >"$file.mpich.txt" 2>&1 || echo "cross-host.sh: MPICH failed for $name, see $file.mpich.txt"
	fi
	echo
}

want() { case " $ONLY " in "  ") return 0 ;; *" $1 "*) return 0 ;; esac; return 1; }

for shape in $SHAPES; do
	rate=""
	[ "$shape" = none ] || rate="-rate $shape"
	# shellcheck disable=SC2086
	"$C" up -hosts 4 -prefix $prefix $rate >"$out/cluster-$shape.txt"
	if [ -n "$TCP_CC" ]; then
		for i in 0 1 2 3; do
			ip netns exec "$prefix-h$i" sysctl -qw net.ipv4.tcp_congestion_control="$TCP_CC"
		done
	fi
	echo "# cluster $prefix: 4 hosts, shape $shape; Open MPI $ompi; congestion control ${TCP_CC:-$(sysctl -n net.ipv4.tcp_congestion_control)}"
	for layout in $LAYOUTS; do
		h=${layout%x*} s=${layout#*x}
		if [ "$layout" = 2x1 ]; then
			want latency && row latency time "latency" "-b lat" 2 1 "$shape"
			want bw && row bw bw "bw" "-b bw" 2 1 "$shape"
		fi
		for c in allreduce bcast reduce allgather reduce_scatter alltoall; do
			want $c && row $c time "$c -m 4:$kmax" "-b $c -M $MAXC" "$h" "$s" "$shape"
		done
		want barrier && row barrier time "barrier" "-b barrier" "$h" "$s" "$shape"
	done
	"$C" down $prefix >/dev/null
done
