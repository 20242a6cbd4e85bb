#!/bin/sh
# compare.sh [OUTDIR]: rdmabench beside Open MPI on this machine, in the same
# run. Every comparison alternates the two commands for $ROUNDS rounds with
# osu-compare (median of per-round ratios, A = rdmago, B = Open MPI) and saves
# its table in OUTDIR/NAME.txt and a chart of both medians in OUTDIR/NAME.png.
#
#   sh bench/compare.sh /tmp/bench-results            # everything, 5 rounds
#   ROUNDS=1 ONLY="lat-shm barrier-np2" sh bench/compare.sh /tmp/try
#
# Needs openmpi-bin and the built mpibench (/work/shared/tools/mpibench).
set -eu
out=${1:-bench-results}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
MPIBENCH=${MPIBENCH:-/work/tools/mpibench}
OSUCMP=${OSUCMP:-/work/shared/tools/osu-compare}
ROUNDS=${ROUNDS:-5}
BUDGET=${BUDGET:-0.1} # seconds of timed loop per size, both sides
ONLY=${ONLY:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

(cd "$root" && go build -o "$out/rdmabench" ./bench && go build -o "$out/rdmarun" ./cmd/rdmarun &&
	go build -o "$out/p2pbench" ./p2p/cmd/p2pbench)
R="$out/rdmarun --stdin none"
B="$out/rdmabench"
M="mpirun.openmpi"
ompi=$($M --version 2>/dev/null | head -1 | sed 's/.*) //')

# retry CMD: the command string for osu-compare that runs CMD up to 3 times
# and prints the output of the first run that succeeds, so that one failed
# run (a crash, a busy port) does not end the whole comparison. Retries are
# counted on stderr (none since verbs/shm's close fix, 82f9c04).
retry() {
	printf 'for i in 1 2 3; do o=$(%s) && { printf "%%s\\n" "$o"; exit 0; }; echo "compare.sh: retrying after a failed run" >&2; done; exit 1' "$1"
}

compare() { # NAME MODE TITLE A B [B_LABEL]
	name=$1 mode=$2 title=$3 a=$(retry "$4") b=$5 blabel=${6:-"Open MPI $ompi"}
	case " $ONLY " in "  ") ;; *" $name "*) ;; *) return 0 ;; esac
	echo "## $name: $title"
	echo "A: $4"
	echo "B: $b"
	"$OSUCMP" --rounds "$ROUNDS" --mode "$mode" --a "$a" --b "$b" | tee "$out/$name.txt"
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

for t in shm tcp; do
	btl=""
	[ $t = tcp ] && btl="--mca btl tcp,self"
	compare lat-$t time "latency, 2 ranks, $t" \
		"$R -np 2 --bind-to core --transport $t $B latency -q --budget ${BUDGET}s" \
		"$M -np 2 --bind-to core $btl $MPIBENCH -b lat -t $BUDGET"
	compare bw-$t bw "bandwidth, 2 ranks, $t" \
		"$R -np 2 --bind-to core --transport $t $B bw -q --budget ${BUDGET}s" \
		"$M -np 2 --bind-to core $btl $MPIBENCH -b bw -t $BUDGET"
done
# p2p over tcp against a plain TCP ping-pong / stream between the same two
# processes (p2pbench -provider rawtcp), both pinned one CPU per rank. From
# 1 byte: a raw write of nothing makes no system call.
P="$out/p2pbench -bind -t $BUDGET"
compare lat-tcpraw time "latency, 2 ranks, p2p tcp vs raw TCP" "$P -min 1 -provider tcp latency" "$P -min 1 -provider rawtcp latency" "raw TCP"
compare bw-tcpraw bw "bandwidth, 2 ranks, p2p tcp vs raw TCP" "$P -provider tcp bw" "$P -provider rawtcp bw" "raw TCP"
compare allreduce-np2 time "allreduce float32, 2 ranks" \
	"$R -np 2 --bind-to core $B allreduce -m 4:16M -q --budget ${BUDGET}s" \
	"$M -np 2 --bind-to core $MPIBENCH -b allreduce -M 16777216 -t $BUDGET"
compare bcast-np2 time "bcast, 2 ranks" \
	"$R -np 2 --bind-to core $B bcast -m 4:16M -q --budget ${BUDGET}s" \
	"$M -np 2 --bind-to core $MPIBENCH -b bcast -M 16777216 -t $BUDGET"
compare barrier-np2 time "barrier, 2 ranks" \
	"$R -np 2 --bind-to core $B barrier -q --budget ${BUDGET}s" \
	"$M -np 2 --bind-to core $MPIBENCH -b barrier -t $BUDGET"
compare allreduce-np8 time "allreduce float32, 8 ranks on 2 cores" \
	"$R -np 8 --oversubscribe $B allreduce -m 4:16M -q --budget ${BUDGET}s" \
	"$M -np 8 --oversubscribe $MPIBENCH -b allreduce -M 16777216 -t $BUDGET"
compare barrier-np8 time "barrier, 8 ranks on 2 cores" \
	"$R -np 8 --oversubscribe $B barrier -q --budget ${BUDGET}s" \
	"$M -np 8 --oversubscribe $MPIBENCH -b barrier -t $BUDGET"
