#!/usr/bin/env bash
# rxevm.sh: rdmago's Soft-RoCE test VM. Boots Debian 12's own kernel under
# QEMU with rdma_rxe loaded and rxe devices configured, runs one command in a
# directory shared from the host, and exits with that command's status. The
# host kernel needs no RDMA support; the VM runs the host's own /usr (shared
# read-only), so binaries built on the host -- cgo against libibverbs too --
# run there unchanged.
#
#   rxevm.sh packages                 print the Debian packages it needs
#   rxevm.sh prepare                  install them (as root), build the boot image
#   rxevm.sh run [options] -- CMD...  boot, run CMD in the current directory
#
# run options:
#   --pair          also rxe1 and rxe2, on the two ends of a veth pair
#   --cpus N        vCPUs (2)            --mem MiB   guest memory (2048)
#   --timeout SEC   hard limit for the whole VM (600); then exit 124
#   -e VAR=VAL      set VAR for CMD (the host environment is not passed)
#
# Exit status of run: CMD's; 124 when the time limit ended the VM; 125 when
# the VM failed before CMD ran (the console's last lines are printed); 130/143
# when interrupted. Nothing is left behind: QEMU is stopped and the per-run
# directory removed on every path out.
#
# Environment: RDMAGO_RXEVM_CACHE (boot image; default ~/.cache/rdmago-rxevm),
# RDMAGO_RXEVM_ACCEL (auto, kvm or tcg). See README.md beside this script.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
cache=${RDMAGO_RXEVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rdmago-rxevm}
export PATH="$PATH:/usr/sbin:/sbin"

# qemu and busybox boot the VM; cpio, kmod and xz build its image; the rest is
# the verbs userspace the tests run (shared into the VM with /usr) and the
# headers cgo builds against. perftest serves rxe-tests.sh --bench.
packages=(qemu-system-x86 busybox-static cpio kmod xz-utils iproute2 rdma-core
	ibverbs-providers ibverbs-utils libibverbs-dev perftest)
# Guest modules, loaded in this order with their dependencies. crc32 has to be
# there before rdma_rxe asks the crypto API for it: the guest has no modprobe
# for the kernel to call.
modules=(virtio_pci virtio_console 9pnet_virtio 9p crc32_generic rdma_rxe ib_uverbs dummy veth)

log() { echo "rxevm: $*" >&2; }
die() { log "error: $*"; exit 125; }

install_packages() {
	local p missing=()
	for p in "${packages[@]}"; do
		dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return 0
	[[ $(id -u) == 0 ]] || die "missing Debian packages (as root: apt-get install ${missing[*]})"
	log "apt-get install ${missing[*]}"
	apt-get update -q >/dev/null ||
		die "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
		die "apt-get install ${missing[*]} failed"
}

# The image depends on the kernel package, busybox and the stage-1 init only;
# everything else comes from the host at run time.
kernel_pkg() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}
image_id() {
	echo "kernel=$1 busybox=$(dpkg-query -W -f '${Version}' busybox-static 2>/dev/null)" \
		"init=$(sha256sum "$here/init" | cut -c1-12) builder=$(sed -n '/^build_image()/,/^}/p' "${BASH_SOURCE[0]}" | sha256sum | cut -c1-12)"
}

build_image() { # kernel-package id
	local kpkg=$1 id=$2 b kver m line n=0
	b=$(mktemp -d "${TMPDIR:-/tmp}/rxevm-image.XXXXXX")
	trap 'rm -rf "$b"' EXIT
	log "fetching $kpkg (Debian's kernel; downloaded, not installed)"
	(cd "$b" && apt-get download -q "$kpkg" >/dev/null 2>"$b/dl.err") ||
		{ cat "$b/dl.err" >&2; die "apt-get download $kpkg failed"; }
	dpkg-deb -x "$b"/*.deb "$b/k"
	kver=$(ls "$b/k/lib/modules")
	[[ -f $b/k/boot/vmlinuz-$kver ]] || die "no kernel in $kpkg"
	depmod -b "$b/k" "$kver"

	# The initramfs: static busybox, the modules, the stage-1 init. /bin, /lib,
	# ... point into /usr, where the host's /usr gets mounted (merged /usr).
	local r=$b/root
	mkdir -p "$r"/{rxevm/bin,rxevm/mod,usr,etc,proc,sys,dev,run,tmp,root}
	for m in bin sbin lib lib64; do ln -s "usr/$m" "$r/$m"; done
	cp /bin/busybox "$r/rxevm/busybox"
	for m in sh mount umount mkdir insmod poweroff cat sleep ln hostname; do
		ln -s ../busybox "$r/rxevm/bin/$m"
	done
	install -m 755 "$here/init" "$r/init"
	# modprobe prints the insmod lines in load order, dependencies first.
	for m in "${modules[@]}"; do
		modprobe -d "$b/k" -S "$kver" --show-depends "$m" || die "no module $m in $kpkg"
	done >"$b/deps"
	while read -r line; do
		set -- $line
		[[ $1 == insmod ]] || continue
		local name=${2##*/}
		name=${name%.xz}
		[[ -f $r/rxevm/mod/$name ]] && continue
		case $2 in
		*.xz) xz -dc "$2" >"$r/rxevm/mod/$name" ;;
		*) cp "$2" "$r/rxevm/mod/$name" ;;
		esac
		shift 2
		echo "/rxevm/mod/$name${*:+ $*}" >>"$r/rxevm/modules"
		n=$((n + 1))
	done <"$b/deps"
	(cd "$r" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$b/initrd"
	cp "$b/k/boot/vmlinuz-$kver" "$cache/vmlinuz.new"
	mv "$b/initrd" "$cache/initrd.new"
	mv "$cache/vmlinuz.new" "$cache/vmlinuz" && mv "$cache/initrd.new" "$cache/initrd"
	echo "$id" >"$cache/id"
	rm -rf "$b"
	trap - EXIT
	log "image ready: $kpkg ($kver), $n modules"
}

prepare() {
	mkdir -p "$cache"
	install_packages
	local kpkg id
	kpkg=$(kernel_pkg)
	if [[ -z $kpkg ]]; then
		apt-get update -q >/dev/null 2>&1 || true
		kpkg=$(kernel_pkg)
	fi
	[[ -n $kpkg ]] || die "apt knows no linux-image-amd64 (Debian's kernel)"
	id=$(image_id "$kpkg")
	# Concurrent prepares (two checkouts on one machine) build one at a time.
	exec 8>"$cache/lock"
	flock 8
	if [[ -f $cache/id && $(<"$cache/id") == "$id" && -f $cache/vmlinuz && -f $cache/initrd ]]; then
		exec 8>&-
		return 0
	fi
	build_image "$kpkg" "$id"
	exec 8>&-
}

run() {
	local pair=0 cpus=2 mem=2048 limit=600
	local -a envs=()
	while (($#)); do
		case $1 in
		--pair) pair=1; shift ;;
		--cpus | --mem | --timeout | -e)
			(($# >= 2)) || die "$1 needs a value"
			case $1 in
			--cpus) cpus=$2 ;;
			--mem) mem=$2 ;;
			--timeout) limit=$2 ;;
			-e)
				[[ $2 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "-e wants VAR=VALUE, not $2"
				envs+=("$2")
				;;
			esac
			shift 2
			;;
		--) shift; break ;;
		*) die "unknown option $1 (usage: rxevm.sh run [--pair] [--cpus N] [--mem MiB] [--timeout SEC] [-e VAR=VAL]... -- CMD...)" ;;
		esac
	done
	(($#)) || die "no command given"
	[[ $cpus =~ ^[0-9]+$ && $mem =~ ^[0-9]+$ && $limit =~ ^[0-9]+$ ]] || die "--cpus, --mem and --timeout take numbers"
	prepare

	local dir
	dir=$(pwd -P)
	case $dir in
	/ | /usr | /usr/* | /proc* | /sys* | /dev* | /run*) die "cannot share $dir into the VM (it would hide the VM's own files)" ;;
	esac

	# The per-run control directory, shared as "ctl": the stage-2 script, the
	# host's verbs configuration, the command, and the status coming back.
	ctl=$(mktemp -d "${TMPDIR:-/tmp}/rxevm-run.XXXXXX")
	qpid= rpid=
	trap 'cleanup' EXIT
	trap 'stop 130' INT
	trap 'stop 143' TERM
	cp "$here/guest.sh" "$ctl/guest.sh"
	mkdir "$ctl/etc"
	cp /etc/ld.so.cache "$ctl/etc/"
	cp -r /etc/libibverbs.d "$ctl/etc/"
	{
		printf 'RXEVM_DIR=%q\nRXEVM_PAIR=%d\n' "$dir" "$pair"
		local e
		for e in "${envs[@]}"; do printf 'export %s=%q\n' "${e%%=*}" "${e#*=}"; done
	} >"$ctl/config"
	{
		printf 'exec'
		printf ' %q' "$@"
		echo
	} >"$ctl/cmd"
	# %q writes bash quoting; the guest's dash reads it. Refuse what dash would
	# read differently ($'...' for control characters).
	grep -q "\$'" "$ctl/config" "$ctl/cmd" && die "arguments and -e values must be printable"

	local accel=${RDMAGO_RXEVM_ACCEL:-auto} cpu=max
	if [[ $accel == auto ]]; then
		# /dev/kvm alone is not enough: a nested (paravirtual) KVM without
		# vmx/svm cannot boot a stock kernel.
		if [[ -w /dev/kvm ]] && grep -qwE 'vmx|svm' /proc/cpuinfo; then accel=kvm; else accel=tcg; fi
	fi
	case $accel in
	kvm) cpu=host ;;
	tcg) accel=tcg,thread=multi ;;
	*) die "RDMAGO_RXEVM_ACCEL must be auto, kvm or tcg" ;;
	esac

	# CMD's output (stdout and stderr together) comes back on a virtio serial
	# port, through a FIFO that cat copies to our stdout as it arrives. (QEMU's
	# stdio backend would close the port at the EOF of our stdin, and the
	# guest's writes would then block.) The kernel console goes to a file,
	# shown when the VM fails.
	local rc=0
	mkfifo "$ctl/out"
	cat "$ctl/out" & rpid=$!
	timeout -k 10 "$limit" qemu-system-x86_64 -accel "$accel" -cpu "$cpu" -smp "$cpus" -m "$mem" \
		-nodefaults -no-user-config -display none -nic none -no-reboot \
		-kernel "$cache/vmlinuz" -initrd "$cache/initrd" \
		-append "console=ttyS0 panic=-1 rdinit=/init loglevel=6" \
		-serial "file:$ctl/console" \
		-chardev "file,id=out,path=$ctl/out" -device virtio-serial-pci \
		-device virtserialport,chardev=out,name=rxevm.out \
		-fsdev "local,id=usr,path=/usr,security_model=none,readonly=on,multidevs=remap" \
		-device virtio-9p-pci,fsdev=usr,mount_tag=usr \
		-fsdev "local,id=ctl,path=$ctl,security_model=none" -device virtio-9p-pci,fsdev=ctl,mount_tag=ctl \
		-fsdev "local,id=work,path=$dir,security_model=none" -device virtio-9p-pci,fsdev=work,mount_tag=work \
		</dev/null & qpid=$!
	wait "$qpid" || rc=$?
	qpid=
	release_reader
	if [[ -s $ctl/rc ]]; then
		rc=$(<"$ctl/rc")
		exit "$rc"
	fi
	if ((rc == 124)); then
		log "the VM ran past its time limit (${limit}s) and was stopped"
	elif [[ -s $ctl/error ]]; then
		log "VM setup failed: $(<"$ctl/error")"
	else
		log "the VM ended without running the command (qemu status $rc)"
	fi
	if [[ -s $ctl/console ]]; then
		log "last console lines:"
		tail -n 30 "$ctl/console" >&2
	fi
	((rc == 124)) && exit 124
	exit 125
}

# If QEMU never opened the FIFO, cat still waits in open(): opening it
# read-write (which never blocks) and closing it lets cat see EOF.
release_reader() {
	[[ -n ${rpid:-} ]] || return 0
	: 1<>"$ctl/out"
	wait "$rpid" 2>/dev/null || true
	rpid=
}

stop() {
	if [[ -n ${qpid:-} ]]; then
		kill "$qpid" 2>/dev/null || true
		wait "$qpid" 2>/dev/null || true
	fi
	qpid=
	release_reader
	log "interrupted"
	exit "$1"
}

cleanup() {
	if [[ -n ${qpid:-} ]]; then
		kill "$qpid" 2>/dev/null || true
		wait "$qpid" 2>/dev/null || true
	fi
	[[ -n ${ctl:-} ]] && release_reader && rm -rf "$ctl"
}

case ${1:-} in
packages) echo "${packages[*]}" ;;
prepare) prepare ;;
run) shift; run "$@" ;;
*)
	echo "usage: rxevm.sh packages | prepare | run [--pair] [--cpus N] [--mem MiB] [--timeout SEC] [-e VAR=VAL]... -- CMD..." >&2
	exit 2
	;;
esac
