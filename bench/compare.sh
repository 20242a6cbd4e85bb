#!/bin/sh
# compare.sh [OUTDIR]: every OSU row rdmabench has, beside Open MPI on this
# machine, in the same run. Each comparison alternates the two commands for
# $ROUNDS rounds with osu-compare (median of per-round ratios, A = rdmago,
# B = Open MPI) and saves its table in OUTDIR/NAME.txt and a chart of both
# medians in OUTDIR/NAME.png; OUTDIR/summary.txt gets one line per row (best,
# worst and per-band ratios, and the sizes where rdmago was behind in every
# round: bench/summary.awk), after a "# NAME: line ..." note of how long a
# cache line took between the first two CPUs just before the row and just
# after it (rdmabench linelat; not with HOG=1): two figures far apart say
# the host moved the vCPUs during the row. Rows are named ROW-npN-MODE[-TRANSPORT]:
#
#   latency, bw, bibw             2 ranks, over shm and tcp (Open MPI: its
#                                 shared-memory BTL, or --mca btl tcp,self)
#   allreduce, bcast, reduce, allgather, reduce_scatter, alltoall, barrier
#                                 at every rank count of $NPS, over the
#                                 default transport; allreduce also over tcp
#   put_latency, put_bw           2 ranks, over shm and tcp, against
#                                 bench/mpiref/put.c (MPI_Put + MPI_Win_flush)
#   lat-tcpraw, bw-tcpraw         p2p over tcp against a raw TCP ping-pong
#   iallreduce                    at every rank count of $NPS, against
#                                 bench/mpiref/iallreduce.c (osu_iallreduce's
#                                 method); osu-compare compares the Overall
#                                 column only: run both by hand for Overlap %
#   allreduce_init                at every rank count of $NPS: the persistent
#                                 allreduce (AllreduceInit, Start+Wait)
#                                 against rdmago's own in-place Allreduce
#
# MODE is "defaults" (rdmarun and mpirun with no placement flag, as a user
# runs them) or "bound" (both --bind-to core; where the ranks outnumber the
# cores, --oversubscribe --bind-to core:overload-allowed, Open MPI's
# spelling, which rdmarun takes as core: ranks pinned to the cores in turn).
#
# HOG=1 keeps one CPU busy (a shell loop pinned to the last CPU) for the
# whole run, for the issue's "stable under load" check: compare each row's
# ratio with and without it; summary.txt says when it ran.
#
#   sh bench/compare.sh /tmp/bench-results                 # everything
#   ROUNDS=1 MAX=1M ONLY="latency-np2-defaults-shm barrier-np2-bound" sh bench/compare.sh /tmp/try
#
# Variables: ROUNDS (7), BUDGET (0.1 s of timed loop per size, both sides),
# WARM (0.05 s of warm-up per size, both sides, where B is mpibench or
# bench/mpiref/iallreduce.c, and on both sides of allreduce_init), MAX
# (largest size, 64M), NPS ("2 4 8"), MODES ("defaults bound"), ONLY (row
# names), MPIBENCH (a built mpibench; default: built here from MPIBENCH_SRC,
# the shared OSU-style MPI benchmark, ../shared/tools/mpibench/mpibench.c
# beside the checkout), OSUCMP (../shared/tools/osu-compare beside the
# checkout). Needs openmpi-bin and libopenmpi-dev (mpicc).
set -eu
out=${1:-bench-results}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-7}
BUDGET=${BUDGET:-0.1}
MAX=${MAX:-64M}
NPS=${NPS:-2 4 8}
MODES=${MODES:-defaults bound}
# Seconds of warm-up per size for the rows against mpibench, both sides:
# mpibench's own -w default; rdmabench would otherwise warm up for a fifth
# of BUDGET (10 ms at 0.05 s against Open MPI's 50 ms).
WARM=${WARM:-0.05}
ONLY=${ONLY:-}
HOG=${HOG:-0}
OSUCMP=${OSUCMP:-$root/../shared/tools/osu-compare}
MPIBENCH_SRC=${MPIBENCH_SRC:-$root/../shared/tools/mpibench/mpibench.c}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

bytes() { # 64M -> 67108864
	case $1 in
	*G) echo $((${1%G} << 30)) ;; *M) echo $((${1%M} << 20)) ;; *K) echo $((${1%K} << 10)) ;; *) echo "$1" ;;
	esac
}
maxb=$(bytes "$MAX")
cores=$(nproc)

(cd "$root" && go build -o "$out/rdmabench" ./bench && go build -o "$out/rdmarun" ./cmd/rdmarun &&
	go build -o "$out/p2pbench" ./p2p/cmd/p2pbench)
if [ -z "${MPIBENCH:-}" ]; then
	MPIBENCH=$out/mpibench
	mpicc.openmpi -O2 -o "$MPIBENCH" "$MPIBENCH_SRC"
fi
mpicc.openmpi -O2 -o "$out/mpibibw" "$root/bench/mpiref/bibw.c"
mpicc.openmpi -O2 -o "$out/mpiput" "$root/bench/mpiref/put.c"
mpicc.openmpi -O2 -o "$out/mpiiallreduce" "$root/bench/mpiref/iallreduce.c"
if [ "$HOG" = 1 ]; then
	# The hog is this script's child; it is ended by its PID on any exit.
	taskset -c $((cores - 1)) sh -c 'while :; do :; done' &
	hog=$!
	trap 'kill "$hog" 2>/dev/null' EXIT
	trap 'exit 130' INT TERM
fi
R="$out/rdmarun --stdin none"
B="$out/rdmabench"
M="mpirun.openmpi"
ompi=$($M --version 2>/dev/null | head -1 | sed 's/.*) //')
: >"$out/summary.txt"
echo "# compare.sh at $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown), $ROUNDS rounds, load: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/summary.txt"
# Open MPI's tcp rows run the system's TCP congestion control; rdmago's
# loopback connections reno whatever it is (tcp.Options.LocalCongestion).
echo "# TCP congestion control: $(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null || echo unknown) (rdmago's loopback connections: reno)" >>"$out/summary.txt"
[ "$HOG" = 1 ] && echo "# HOG=1: CPU $((cores - 1)) kept busy by a spinning shell loop for the whole run" >>"$out/summary.txt"

# retry CMD: the command string for osu-compare that runs CMD up to 3 times
# and prints the output of the first run that succeeds, so that one failed
# run (a crash, a busy port) does not end the whole comparison. Retries are
# counted on stderr.
retry() {
	printf 'for i in 1 2 3; do o=$(%s) && { printf "%%s\\n" "$o"; exit 0; }; echo "compare.sh: retrying after a failed run" >&2; done; exit 1' "$1"
}

# linelat RDMABENCH: how many ns a cache line takes between CPUs 0 and 1
# now (rdmabench linelat), "?" if it cannot tell.
linelat() {
	n=$("$1" linelat 2>/dev/null | sed -n 's/.*CPU 1: \([0-9]*\) ns.*/\1/p')
	echo "${n:-?}"
}

compare() { # NAME MODE TITLE A B [B_LABEL]
	name=$1 mode=$2 title=$3 a=$(retry "$4") b=$5 blabel=${6:-"Open MPI $ompi"}
	case " $ONLY " in "  ") ;; *" $name "*) ;; *) return 0 ;; esac
	echo "## $name: $title"
	echo "A: $4"
	echo "B: $b"
	# How far apart the vCPUs sit moves every small-message figure of both
	# libraries (docs/benchmarks.md), and the host may move them within a
	# row: note it before the row and after. Not beside the hog, whose CPU
	# the probe's second thread would share.
	before=""
	if [ "$HOG" != 1 ]; then
		before=$(linelat "$B")
		echo "# $name: line CPU 0 - CPU 1: $before ns one way before the row"
	fi
	if ! "$OSUCMP" --rounds "$ROUNDS" --mode "$mode" --timeout 1800 --a "$a" --b "$b" >"$out/$name.txt" 2>"$out/$name.err"; then
		cat "$out/$name.txt" "$out/$name.err"
		echo "$name FAILED (see $name.err)" | tee -a "$out/summary.txt"
		return 0
	fi
	if [ -n "$before" ]; then
		echo "# $name: line CPU 0 - CPU 1: $before ns one way before the row, $(linelat "$B") ns after" | tee -a "$out/summary.txt"
	fi
	cat "$out/$name.txt"
	# One summary line: worst and best ratio, the worst of each band and the
	# sizes behind in every round.
	awk -v name="$name" -v mode="$mode" -f "$root/bench/summary.awk" "$out/$name.txt" >>"$out/summary.txt"
	hdr="# Size  Latency (us)"
	[ "$mode" = bw ] && hdr="# Size  Bandwidth (MB/s)"
	{ echo "$hdr"; awk '!/^#/ && $1 ~ /^[0-9]+$/ {print $1, $2}' "$out/$name.txt"; } >"$out/$name.rdmago.txt"
	{ echo "$hdr"; awk '!/^#/ && $1 ~ /^[0-9]+$/ {print $1, $3}' "$out/$name.txt"; } >"$out/$name.ompi.txt"
	case $name in barrier*) ;; *) # one point at size 0: no chart
		"$B" plot -o "$out/$name.png" -title "$title (median of $ROUNDS)" \
			"$out/$name.rdmago.txt=rdmago" "$out/$name.ompi.txt=$blabel" >/dev/null ||
			echo "compare.sh: no chart for $name" >&2
		;;
	esac
	echo
}

# placement MODE NP: the flags both launchers get for it ("" for defaults).
placement() {
	case $1 in
	defaults) [ "$2" -le "$cores" ] && echo "" || echo "--oversubscribe" ;;
	bound) [ "$2" -le "$cores" ] && echo "--bind-to core" || echo "--oversubscribe --bind-to core:overload-allowed" ;;
	esac
}

p2pmax=$maxb
for pm in $MODES; do
	f=$(placement "$pm" 2)
	for t in shm tcp; do
		btl="" osc=""
		[ $t = tcp ] && btl="--mca btl tcp,self"
		# Open MPI's windows take its shared-memory component (osc sm)
		# whatever the BTLs: with tcp,self alone a Put+Flush read 0.02 us,
		# a copy. Its one-sided path over the tcp BTL is osc pt2pt.
		[ $t = tcp ] && osc="--mca osc pt2pt"
		compare latency-np2-$pm-$t time "latency, 2 ranks, $t, $pm" \
			"$R -np 2 $f --transport $t $B latency -m 0:$p2pmax -q --budget ${BUDGET}s --warmup-budget ${WARM}s" \
			"$M -np 2 $f $btl $MPIBENCH -b lat -m $p2pmax -t $BUDGET -w $WARM"
		compare bw-np2-$pm-$t bw "bandwidth, 2 ranks, $t, $pm" \
			"$R -np 2 $f --transport $t $B bw -m 1:$p2pmax -q --budget ${BUDGET}s --warmup-budget ${WARM}s" \
			"$M -np 2 $f $btl $MPIBENCH -b bw -m $p2pmax -t $BUDGET -w $WARM"
		compare bibw-np2-$pm-$t bw "bidirectional bandwidth, 2 ranks, $t, $pm" \
			"$R -np 2 $f --transport $t $B bibw -m 1:$p2pmax -q --budget ${BUDGET}s" \
			"$M -np 2 $f $btl $out/mpibibw -m $p2pmax -t $BUDGET"
		compare put_latency-np2-$pm-$t time "put latency (Put+Flush), 2 ranks, $t, $pm" \
			"$R -np 2 $f --transport $t $B put_latency -m 1:$p2pmax -q --budget ${BUDGET}s" \
			"$M -np 2 $f $btl $osc $out/mpiput latency -m $p2pmax -t $BUDGET"
		compare put_bw-np2-$pm-$t bw "put bandwidth, 2 ranks, $t, $pm" \
			"$R -np 2 $f --transport $t $B put_bw -m 1:$p2pmax -q --budget ${BUDGET}s" \
			"$M -np 2 $f $btl $osc $out/mpiput bw -m $p2pmax -t $BUDGET"
	done
done
# p2p over tcp against a plain TCP ping-pong / stream between the same two
# processes (p2pbench -provider rawtcp), both pinned one CPU per rank. From
# 1 byte: a raw write of nothing makes no system call.
P="$out/p2pbench -bind -t $BUDGET"
compare lat-tcpraw time "latency, 2 ranks, p2p tcp vs raw TCP" "$P -min 1 -provider tcp latency" "$P -min 1 -provider rawtcp latency" "raw TCP"
compare bw-tcpraw bw "bandwidth, 2 ranks, p2p tcp vs raw TCP" "$P -provider tcp bw" "$P -provider rawtcp bw" "raw TCP"

for np in $NPS; do
	for pm in $MODES; do
		f=$(placement "$pm" "$np")
		for row in allreduce bcast reduce allgather reduce_scatter alltoall; do
			compare $row-np$np-$pm time "$row, $np ranks, $pm" \
				"$R -np $np $f $B $row -m 4:$MAX -q --budget ${BUDGET}s --warmup-budget ${WARM}s" \
				"$M -np $np $f $MPIBENCH -b $row -M $maxb -t $BUDGET -w $WARM"
		done
		compare barrier-np$np-$pm time "barrier, $np ranks, $pm" \
			"$R -np $np $f $B barrier -q --budget ${BUDGET}s --warmup-budget ${WARM}s" \
			"$M -np $np $f $MPIBENCH -b barrier -t $BUDGET -w $WARM"
		compare iallreduce-np$np-$pm time "iallreduce (overall time of start+compute+wait), $np ranks, $pm" \
			"$R -np $np $f $B iallreduce -m 4:$MAX -q --budget ${BUDGET}s --warmup-budget ${WARM}s" \
			"$M -np $np $f $out/mpiiallreduce -m $maxb -t $BUDGET -w $WARM"
		compare allreduce_init-np$np-$pm time "persistent allreduce vs Allreduce in place, $np ranks, $pm" \
			"$R -np $np $f $B allreduce --api persistent -m 4:$MAX -q --budget ${BUDGET}s --warmup-budget ${WARM}s" \
			"$R -np $np $f $B allreduce --api inplace -m 4:$MAX -q --budget ${BUDGET}s --warmup-budget ${WARM}s" "rdmago Allreduce (in place)"
		compare allreduce-np$np-$pm-tcp time "allreduce, $np ranks, tcp, $pm" \
			"$R -np $np $f --transport tcp $B allreduce -m 4:$MAX -q --budget ${BUDGET}s --warmup-budget ${WARM}s" \
			"$M -np $np $f --mca btl tcp,self $MPIBENCH -b allreduce -M $maxb -t $BUDGET -w $WARM"
	done
done
echo "== summary (ratio = rdmago / Open MPI for times, rdmago / Open MPI for bandwidth)"
cat "$out/summary.txt"
