#!/usr/bin/env bash
# rdmago's whole test suite: formatting, vet, unit and multi-process tests
# (verbs/ under the race detector), then the serial stage (network
# namespaces, sshd) and the Soft-RoCE VM stage for the ibv provider
# (.ci/rxe-tests.sh, which boots the repository's own VM, internal/rxevm).
#
#   ./test.sh            everything (root on Debian 12; installs packages first:
#                        .ci/install, and the VM stage its own)
#   RDMAGO_SKIP_RXE=1    skip the VM stage (developers without the time; CI never sets it)
#   RDMAGO_LONG=1        also the long soak / cross-product runs
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$PATH:/usr/local/go/bin"
# The launcher tests (real Slurm, Hydra, Open MPI) are part of the whole run.
export RDMAGO_LAUNCHER_TESTS="${RDMAGO_LAUNCHER_TESTS:-1}"

if [ "$(id -u)" -eq 0 ]; then
	bash .ci/install
fi

echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$bad" ]; then
	echo "gofmt would change:" $bad >&2
	exit 1
fi

echo "== go vet"
go vet ./...

echo "== go test -race (all packages)"
go test -race -count=1 -timeout 20m -p 2 ./...

# The multi-megabyte tests (every size threshold of the collectives, p2p's
# protocol limits, comm over tcp and shm) skip or are left out under the
# race detector, which makes them about ten times slower: they run here;
# so do the allocation counts, which the race detector's own allocations
# would spoil.
echo "== go test -run 'Large|Alloc' (without -race)"
go test -count=1 -timeout 10m -p 2 -run 'Large|Alloc' ./collectives/... ./comm/... ./p2p/...

if [ -f .ci/rxe-tests.sh ] && [ "${RDMAGO_SKIP_RXE:-}" != 1 ]; then
	echo "== Soft-RoCE VM (verbs/ibv)"
	bash .ci/rxe-tests.sh
fi
echo "== all tests passed"
