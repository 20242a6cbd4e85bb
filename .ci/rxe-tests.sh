#!/usr/bin/env bash
# rxe-tests.sh: the real-verbs part of CI. Builds the ibv provider's test
# binaries and the ibv-pingpong command with -tags rdma on the host, boots the
# project's Soft-RoCE VM (internal/rxevm) once, and runs there:
#   - verbs/ibv tests: device selection, the verbs conformance suite
#     (two-process cases included), the provider's own tests, under -race
#   - cmd/ibv-pingpong tests: interop with rdma-core's ibv_rc_pingpong both ways
#   - the built ibv-pingpong binary against ibv_rc_pingpong both ways
#   - the conformance suite and the interop again between rxe1 and rxe2, two
#     devices on the ends of a veth pair (rxevm.sh run --pair), like two hosts
#   - the whole stack over ibv: rdmarun --transport ibv starts internal/ibvstack
#     (comm.FromEnv, allreduce up to past 1 MiB, bcast from non-zero roots,
#     barriers, every result checked): 2 ranks on rxe0; 3 ranks on rxe0 with
#     the one-sided allreduce (RDMA WRITE with immediate); 4 ranks whose
#     devices alternate between rxe1 and rxe2
#   - per-job device selection (comm's RDMAGO_IB_HCA): a missing device fails
#     the job with the devices present named; =rxe1 runs it on rxe1 only
#   - two cases of the fault matrix over ibv: a rank killed in an allreduce
#     loop and one stopped in a bcast loop; the survivors and rdmarun name it
# and checks by name that those tests passed (a silent skip fails).
#
#   .ci/rxe-tests.sh            tests (a few minutes on an idle 2-core machine, 8 at a
#                               load of 12-15: the VM is emulated where KVM is not
#                               usable; the VM's time limit is 15 minutes)
#   .ci/rxe-tests.sh --bench    also perftest's ib_write_bw / ib_send_lat beside
#                               the provider's benchmarks, in the same VM run
#
# Environment: RDMAGO_RXEVM_CACHE (the VM's boot image, default
# ~/.cache/rdmago-rxevm), RXE_TESTS_KEEP=1 keeps the work directory.
# Exit status: 0 when everything passed; 1 on any failure, including a VM
# that cannot boot.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd -P)
bench=0
case ${1:-} in
	--bench) bench=1 ;;
	"") ;;
	*) echo "usage: $0 [--bench]" >&2; exit 2 ;;
esac
command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"

# The harness writes only to its image cache and $TMPDIR.
rxevm() { bash "$repo/internal/rxevm/rxevm.sh" "$@"; }

work=$(mktemp -d "${TMPDIR:-/tmp}/rxe-tests.XXXXXX")
if [[ -z ${RXE_TESTS_KEEP:-} ]]; then trap 'rm -rf "$work"' EXIT; else echo "rxe-tests: keeping $work"; fi
t0=$SECONDS
declare -a summary=()
failed=0
note() { # name status [detail]
	summary+=("$(printf '%-58s %s%s' "$1" "$2" "${3:+  ($3)}")")
	[[ $2 == PASS ]] || failed=1
}

echo "== rxevm prepare (idempotent; installs qemu, rdma-core and libibverbs-dev when missing)"
if ! rxevm prepare; then
	echo "rxe-tests: FAIL: rxevm prepare failed" >&2
	exit 1
fi

echo "== build with -tags rdma (cgo, libibverbs)"
export CGO_ENABLED=1
go vet -tags rdma ./verbs/ibv/... ./cmd/ibv-pingpong/... ./internal/ibvstack/...
go test -tags rdma -race -c -o "$work/ibv.test" ./verbs/ibv
go test -tags rdma -c -o "$work/ibvbench.test" ./verbs/ibv
go test -tags rdma -c -o "$work/pingpong.test" ./cmd/ibv-pingpong
go build -tags rdma -o "$work/ibv-pingpong" ./cmd/ibv-pingpong
go build -o "$work/rdmarun" ./cmd/rdmarun # the launcher needs no tag; the ranks do
go build -tags rdma -o "$work/ibvstack" ./internal/ibvstack
go build -tags rdma -o "$work/faultprog" ./comm/internal/faultprog
note "host: go vet + build -tags rdma" PASS

# Everything in one VM boot. Logs go to the shared work directory; the host
# judges them afterwards.
cat >"$work/inside.sh" <<'EOF'
# runs inside the rxevm VM (dash), in the shared work directory
G=$RXE_VM_GID_INDEX D=$RXE_VM_DEV
echo "VM: $D GID index $G, $(nproc) CPUs"
./ibv.test -test.v -test.timeout 480s >ibv.log 2>&1; echo "ibv.test exit $?" >>status
./pingpong.test -test.v -test.timeout 300s >pingpong.log 2>&1; echo "pingpong.test exit $?" >>status

# The command itself: real ibv_rc_pingpong server, our client (GID auto-detected).
# ibv_rc_pingpong has no time limit of its own: busybox timeout gives it one.
timeout 120 ibv_rc_pingpong -d $D -g $G -p 18515 -n 200 >pp1-srv.log 2>&1 & s=$!
./ibv-pingpong -d $D -e -n 200 -p 18515 -timeout 60s 127.0.0.1 >pp1-cli.log 2>&1; c=$?
echo "pp1-client exit $c" >>status; [ $c = 0 ] || kill $s 2>/dev/null
wait $s; echo "pp1-server exit $?" >>status
# Our server (explicit -g), real client; start the client once we listen.
./ibv-pingpong -d $D -g $G -e -n 200 -p 18516 -bind 127.0.0.1 -timeout 60s >pp2-srv.log 2>pp2-srv.err & s=$!
i=0; while ! grep -q "waiting for a connection" pp2-srv.err 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
timeout 120 ibv_rc_pingpong -d $D -g $G -p 18516 -n 200 127.0.0.1 >pp2-cli.log 2>&1; echo "pp2-client exit $?" >>status
wait $s; echo "pp2-server exit $?" >>status

# rxe1 and rxe2 (--pair) sit on the two ends of a veth pair, like two hosts:
# the conformance suite with its devices alternating between them, and the
# interop across that wire (the out-of-band TCP exchange stays on loopback).
RDMAGO_IBV_TEST_DEVICES="$RXE_VM_DEV1,$RXE_VM_DEV2" ./ibvbench.test -test.v -test.run '^TestConformance$' \
	-test.timeout 300s >pair.log 2>&1; echo "pair.test exit $?" >>status
timeout 120 ibv_rc_pingpong -d $RXE_VM_DEV1 -g $RXE_VM_GID_INDEX1 -p 18517 -n 100 >pp3-srv.log 2>&1 & s=$!
./ibv-pingpong -d $RXE_VM_DEV2 -e -n 100 -p 18517 -timeout 60s 127.0.0.1 >pp3-cli.log 2>&1; c=$?
echo "pp3-client exit $c" >>status; [ $c = 0 ] || kill $s 2>/dev/null
wait $s; echo "pp3-server exit $?" >>status

# The whole stack over ibv: rdmarun (rendezvous on 127.0.0.1) starts the
# ranks, which join with comm.FromEnv and run checked collectives through
# collectives -> p2p -> verbs/ibv. 2 ranks on rxe0 (the cost model's
# algorithms); 3 ranks on rxe0 with every allreduce forced to the one-sided
# ring (p2p windows: RDMA WRITE with immediate), an odd rank count; 4 ranks
# on rxe1, rxe2, rxe1, rxe2 (by local rank), so that some pairs cross the
# veth wire and some share a device. p2p's waits block after a short spin,
# so 2 vCPUs do (4 were slower on a loaded 2-core host under TCG). Three
# time limits: the program's own, rdmarun's (which stops every rank),
# busybox's.
stack() { # name ranks devices [rdmarun options]
	name=$1 n=$2 dev=$3; shift 3; t=$(date +%s)
	timeout 200 ./rdmarun -np $n --transport ibv --timeout 170s --stdin none "$@" \
		./ibvstack -device $dev -timeout 150s >$name.log 2>&1
	echo "$name exit $?" >>status; echo "$name took $(($(date +%s) - t)) s" >>status
}
stack stack2 2 $D
stack stack3 3 $D -x RDMAGO_ALLREDUCE_ALGO=ring_onesided
stack stack4 4 $RXE_VM_DEV1,$RXE_VM_DEV2

# Per-job device selection through comm's edge (RDMAGO_IB_HCA, no -device):
# a device that is not there fails the job with the devices present named;
# "=rxe1" runs the job on rxe1 alone, which the packet counters of the
# three devices show.
sent() { cat /sys/class/infiniband/$1/ports/1/hw_counters/sent_pkts 2>/dev/null || echo none; }
timeout 100 ./rdmarun -np 2 --transport ibv --timeout 80s --stdin none -x RDMAGO_IB_HCA=nosuch0 \
	./ibvstack -timeout 60s >hca-missing.log 2>&1
echo "hca-missing exit $?" >>status
before="$(sent rxe0) $(sent rxe1) $(sent rxe2)"
timeout 200 ./rdmarun -np 2 --transport ibv --timeout 170s --stdin none -x RDMAGO_IB_HCA==rxe1 \
	./ibvstack -timeout 150s >hca-rxe1.log 2>&1
echo "hca-rxe1 exit $?" >>status
echo "hca-rxe1 sent_pkts rxe0 rxe1 rxe2: $before -> $(sent rxe0) $(sent rxe1) $(sent rxe2)" >>status

# The fault matrix over ibv (comm/faults_test.go runs it over shm and tcp):
# 3 ranks on rxe0, rank 1 killed (SIGKILL) inside an allreduce loop,
# then stopped (SIGSTOP) inside a bcast loop. The survivors must fail naming
# rank 1 and rdmarun must name it; the host judges the logs. The grace
# after rdmarun's SIGTERM (which the ranks ignore) outlasts the liveness
# timeout: over rxe a killed peer is noticed by liveness, not at once.
fault() { # name coll fault
	timeout 150 ./rdmarun -np 3 --transport ibv --timeout 120s --grace 10s --stdin none \
		./faultprog -coll $2 -n 64 -victim 1 -fault $3 -at coll \
		-liveness 3s -deadline 100s >$1.log 2>&1
	echo "$1 exit $?" >>status
}
fault fault-kill allreduce kill
fault fault-stop bcast stop

if [ "${BENCH:-0}" = 1 ]; then
	pair() { # perftest server + client on the same device, client output kept;
		# perftest's clock calibration sometimes fails under TCG (figures
		# "inf"): then once more
		for try in 1 2; do
			timeout 120 "$@" >perf-srv.log 2>&1 & s=$!
			sleep 1; timeout 120 "$@" 127.0.0.1 >"$OUT" 2>&1; r=$?; [ $r = 0 ] || kill $s 2>/dev/null; wait $s
			grep -q " inf " "$OUT" || break
		done
		echo "$NAME exit $r" >>status
	}
	OUT=perf-write.log NAME=ib_write_bw pair ib_write_bw -d $D -x $G -F -n 2000
	OUT=perf-lat.log NAME=ib_send_lat pair ib_send_lat -d $D -x $G -F -n 2000
	./ibvbench.test -test.run '^$' -test.bench . -test.benchtime 2000x -test.benchmem >bench.log 2>&1
	echo "bench exit $?" >>status
fi
EOF

cpus=2
((bench)) && cpus=4 # busy-polling peers want a vCPU each (internal/rxevm/README.md)
echo "== boot the VM and run ($cpus vCPUs)"
rc=0
(cd "$work" && rxevm run --pair --cpus "$cpus" --timeout 900 -e BENCH="$bench" -- sh ./inside.sh) || rc=$?
if [[ ! -f $work/status ]]; then
	# 125: the VM failed to boot or set up rxe0; 124: timeout. Never a silent skip.
	echo "rxe-tests: FAIL: the rxe VM did not run the tests (rxevm exit $rc; 125 = VM failed to boot)" >&2
	exit 1
fi
if ((rc != 0)); then note "VM run" FAIL "rxevm exit $rc"; fi

status() { grep -q "^$1 exit 0$" "$work/status"; }
passed() { grep -qE -- "^--- PASS: $2 " "$work/$1"; }
for t in TestDeviceSelection TestConformance TestSendRecvImmBatches TestInlineAndGoMemory TestPostTimeErrors \
	TestCloseFlushes TestWaitCancel TestCQOverrun; do
	if passed ibv.log "$t"; then note "vm: verbs/ibv $t (-race)" PASS; else note "vm: verbs/ibv $t (-race)" FAIL "not PASS in ibv.log"; fi
done
# The two-process conformance cases must have run, not skipped.
if grep -qE -- "--- PASS: TestConformance/TwoProcess " "$work/ibv.log"; then
	note "vm: verbs/ibv conformance, two-process cases" PASS
else
	note "vm: verbs/ibv conformance, two-process cases" FAIL
fi
status ibv.test || note "vm: ibv.test exit status" FAIL "$(grep '^ibv.test' "$work/status")"
for t in TestInteropGoClient TestInteropGoServer TestGoToGo; do
	if passed pingpong.log "$t"; then note "vm: cmd/ibv-pingpong $t" PASS; else note "vm: cmd/ibv-pingpong $t" FAIL "not PASS in pingpong.log"; fi
done
status pingpong.test || note "vm: pingpong.test exit status" FAIL "$(grep '^pingpong.test' "$work/status")"
if status pp1-client && status pp1-server && grep -q "200 iters in" "$work/pp1-cli.log"; then
	note "vm: ibv_rc_pingpong server <- ibv-pingpong client" PASS
else
	note "vm: ibv_rc_pingpong server <- ibv-pingpong client" FAIL
fi
if status pp2-client && status pp2-server && grep -q "200 iters in" "$work/pp2-cli.log"; then
	note "vm: ibv-pingpong server <- ibv_rc_pingpong client" PASS
else
	note "vm: ibv-pingpong server <- ibv_rc_pingpong client" FAIL
fi

if passed pair.log TestConformance && status pair.test; then
	note "vm: verbs/ibv conformance across rxe1 <-> rxe2 (veth)" PASS
else
	note "vm: verbs/ibv conformance across rxe1 <-> rxe2 (veth)" FAIL
fi
if status pp3-client && status pp3-server && grep -q "100 iters in" "$work/pp3-cli.log"; then
	note "vm: ibv_rc_pingpong on rxe1 <- ibv-pingpong on rxe2" PASS
else
	note "vm: ibv_rc_pingpong on rxe1 <- ibv-pingpong on rxe2" FAIL
fi

# Every rank printed its "pass" line (transports all ibv; a forced allreduce
# algorithm the only one that ran), rank 0 the OK line.
for job in "stack2 2 rxe0" "stack3 3 rxe0 ring_onesided" "stack4 4 rxe1/rxe2"; do
	read -r name n devs algo <<<"$job"
	log=$work/$name.log
	took=$(sed -n "s/^$name took \(.*\)$/\1/p" "$work/status")
	line="^ibvstack: rank [0-9]+/$n pass device=[^ ]+ transport=(ibv|self)(,(ibv|self))* "
	[[ -z $algo ]] || line+=".* algorithms=allreduce:$algo,bcast:"
	ranks=$(grep -cE "$line" "$log" || true)
	title="vm: rdmarun -np $n ibvstack over ibv ($devs${algo:+, $algo})"
	if status "$name" && [[ $ranks == "$n" ]] && grep -qx "ibvstack: OK ranks=$n transport=ibv" "$log"; then
		note "$title" PASS "$took"
	else
		note "$title" FAIL "$(grep "^$name exit" "$work/status"), $ranks of $n ranks passed"
	fi
done

# RDMAGO_IB_HCA: the missing device named with the list of those present;
# the job on =rxe1 passed and moved packets on rxe1 only.
if ! status hca-missing && grep -q 'no RDMA device matches \\\?"nosuch0\\\?" (have rxe0, rxe1, rxe2)' "$work/hca-missing.log"; then
	note "vm: RDMAGO_IB_HCA=nosuch0 fails, naming rxe0, rxe1, rxe2" PASS
else
	note "vm: RDMAGO_IB_HCA=nosuch0 fails, naming rxe0, rxe1, rxe2" FAIL "$(grep '^hca-missing' "$work/status")"
fi
read -r r0 r1 r2 _ a0 a1 a2 <<<"$(sed -n 's/^hca-rxe1 sent_pkts rxe0 rxe1 rxe2: //p' "$work/status")"
if status hca-rxe1 && grep -qx "ibvstack: OK ranks=2 transport=ibv" "$work/hca-rxe1.log" &&
	[[ $r1 =~ ^[0-9]+$ && $a1 =~ ^[0-9]+$ ]] && ((a1 > r1)) && [[ $r0 == "$a0" && $r2 == "$a2" ]]; then
	note "vm: RDMAGO_IB_HCA==rxe1 runs the job on rxe1 only" PASS
else
	note "vm: RDMAGO_IB_HCA==rxe1 runs the job on rxe1 only" FAIL "$(grep '^hca-rxe1' "$work/status" | tr '\n' ' ')"
fi

# Fault cases: rdmarun fails, both survivors (ranks 0 and 2) report the
# loss of rank 1 (sentinel lost, rank named 1), and rdmarun's last line
# names rank 1 as where the failure began. Detection time (fault to the
# slower survivor's error) is shown; the VM's emulated CPU makes it no test.
for job in "fault-kill SIGKILL allreduce" "fault-stop SIGSTOP bcast"; do
	read -r name sig coll <<<"$job"
	log=$work/$name.log
	title="vm: fault matrix over ibv: $sig of rank 1 in $coll"
	t0f=$(sed -n 's/^inject rank=1 .* t=\([0-9]*\)$/\1/p' "$log" | head -1)
	survivors=$(grep -cE '^fail rank=[02] .* sentinel=lost named=1 ' "$log" || true)
	tl=$(sed -n 's/^fail rank=[02] t=\([0-9]*\) .*/\1/p' "$log" | sort -n | tail -1)
	took=""
	[[ -n $t0f && -n $tl ]] && took="detected in $(((tl - t0f) / 1000000)) ms"
	if ! status "$name" && [[ $survivors == 2 ]] && tail -n 3 "$log" | grep -qE '^rdmarun: .*(began at rank 1 |rank 1 \(host [^)]*\) was (killed|lost))'; then
		note "$title" PASS "$took"
	else
		note "$title" FAIL "$(grep "^$name exit" "$work/status"), $survivors of 2 survivors named rank 1"
	fi
done

if ((failed)); then
	for f in fault-kill.log fault-stop.log ibv.log pingpong.log pair.log pp1-srv.log pp1-cli.log pp2-srv.log pp2-srv.err pp2-cli.log pp3-srv.log pp3-cli.log stack2.log stack3.log stack4.log hca-missing.log hca-rxe1.log; do
		[[ -f $work/$f ]] || continue
		echo "---- $f (failures and last lines)"
		grep -E -- "--- FAIL|Error Trace|Error:|panic" "$work/$f" | head -40 || true
		tail -n 15 "$work/$f"
	done
fi

if ((bench)); then
	echo "== benchmarks (emulated VM: for comparison with perftest only, not real NIC figures)"
	grep -E "^Benchmark" "$work/bench.log" || { cat "$work/bench.log"; note "bench" FAIL; }
	echo "-- ib_write_bw -d rxe0 -x G -F -n 2000 (64 KiB):"
	grep -A1 "#bytes" "$work/perf-write.log" | tail -1 || true
	echo "-- ib_send_lat -d rxe0 -x G -F -n 2000 (2 B):"
	grep -A1 "#bytes" "$work/perf-lat.log" | tail -1 || true
	pbw=$(awk '/#bytes/ {getline; print $4; exit}' "$work/perf-write.log")
	ptyp=$(awk '/#bytes/ {getline; print $5; exit}' "$work/perf-lat.log")
	gbw=$(awk '/^BenchmarkWriteBW/ {for (i = 1; i < NF; i++) if ($(i+1) == "MB/s") print $i}' "$work/bench.log")
	gtyp=$(awk '/^BenchmarkSendLat/ {for (i = 1; i < NF; i++) if ($(i+1) == "us-typical/one-way") print $i}' "$work/bench.log")
	num='^[0-9]+([.][0-9]+)?$'
	if [[ $pbw =~ $num && $gbw =~ $num && $ptyp =~ $num && $gtyp =~ $num ]]; then
		awk -v pbw="$pbw" -v gbw="$gbw" -v pt="$ptyp" -v gt="$gtyp" 'BEGIN {
			printf "write bandwidth: ibv provider %.2f MB/s, ib_write_bw average %.2f MB/s: ratio %.2f\n", gbw, pbw, gbw / pbw
			printf "send latency (typical one-way): ibv provider %.2f us, ib_send_lat %.2f us: ratio %.2f\n", gt, pt, gt / pt }'
	fi
fi

echo "== summary ($((SECONDS - t0)) s)"
printf '%s\n' "${summary[@]}"
if ((failed)); then
	echo "rxe-tests: FAIL"
	exit 1
fi
echo "rxe-tests: PASS"
