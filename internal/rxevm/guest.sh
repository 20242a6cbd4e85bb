# Stage 2 of the rxevm guest: PID 1, run by the host's dash from the control
# share (so a change here needs no new image). Sets up the rest of the system
# and the Soft-RoCE devices, runs the command, leaves its status for the host
# and powers off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/rxevm/bin HOME=/root TMPDIR=/tmp
ctl=/rxevm/ctl
off() {
	cd /
	sync
	/rxevm/bin/poweroff -f
	sleep 5
}
fail() {
	echo "rxevm guest: $*" >/dev/console
	echo "$*" >$ctl/error
	off
}

mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t tmpfs run /run
mount -t tmpfs -o mode=1777 tmp /tmp
ln -s /proc/self/fd /dev/fd
ln -s fd/0 /dev/stdin && ln -s fd/1 /dev/stdout && ln -s fd/2 /dev/stderr
# The host's library cache and verbs provider list; the rest of /etc is the VM's own.
cp -r $ctl/etc/. /etc/
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >/etc/passwd
printf 'root:x:0:\nnogroup:x:65534:\n' >/etc/group
printf '127.0.0.1\tlocalhost\n198.18.0.1\trxevm\n' >/etc/hosts
hostname rxevm

. $ctl/config
mkdir -p "$RXEVM_DIR" &&
	mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=mmap work "$RXEVM_DIR" ||
	fail "cannot mount the shared directory at $RXEVM_DIR"

# gid DEV IP: the index of DEV's RoCE v2 GID for IP (an IPv4-mapped IPv6
# address). rdma_rxe fills the GID table shortly after the address is up.
gid() {
	want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' $(echo "$2" | tr . ' '))
	port=/sys/class/infiniband/$1/ports/1
	tries=0
	while [ $tries -lt 200 ]; do
		for f in $port/gids/*; do
			n=${f##*/}
			if [ "$(cat $f 2>/dev/null)" = "$want" ] && [ "$(cat $port/gid_attrs/types/$n 2>/dev/null)" = "RoCE v2" ]; then
				echo $n
				return 0
			fi
		done
		sleep 0.05
		tries=$((tries + 1))
	done
	return 1
}

# rxe0 on a dummy netdev: the VM has no NIC, and rdma_rxe loops traffic
# between two QPs of one device back inside itself.
ip link set lo up
ip link add eth0 type dummy && ip addr add 198.18.0.1/24 dev eth0 && ip link set eth0 up ||
	fail "cannot set up eth0"
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0 failed"
g=$(gid rxe0 198.18.0.1) || fail "rxe0 has no RoCE v2 GID for 198.18.0.1"
export RXE_VM_DEV=rxe0 RXE_VM_IP=198.18.0.1 RXE_VM_GID_INDEX=$g

# --pair: rxe1 on veth1 (198.18.1.1) and rxe2 on veth2 (198.18.1.2), a cable
# between two "hosts". rdma_rxe in Linux 6.1 works only in the initial network
# namespace, so both ends stay in it. Left alone, the kernel would deliver
# 198.18.1.1 -> 198.18.1.2 through lo (both addresses are local), where no rxe
# device listens; per-source routes ahead of the local table send it over the
# veth instead, and the receiving end accepts a local source address.
echo "rxevm guest: rxe0 ready (GID $g)" >/dev/console
if [ "$RXEVM_PAIR" = 1 ]; then
	ip link add veth1 type veth peer name veth2 || fail "cannot create veth1/veth2"
	# A veth hands each packet to the receiving CPU's backlog, which drops
	# beyond netdev_max_backlog (1000). rdma_rxe answers an 8 MiB READ in one
	# burst of 1 KiB packets, so with the default some were dropped (softnet_stat)
	# and the READ ended in RETRY_EXC_ERR about one time in six.
	echo 100000 >/proc/sys/net/core/netdev_max_backlog
	echo 0 >/proc/sys/net/ipv4/conf/all/rp_filter
	for i in 1 2; do
		j=$((3 - i))
		ip addr add 198.18.1.$i/32 dev veth$i && ip link set veth$i up || fail "cannot set up veth$i"
		echo 1 >/proc/sys/net/ipv4/conf/veth$i/accept_local
		echo 0 >/proc/sys/net/ipv4/conf/veth$i/rp_filter
		ip route add 198.18.1.$j dev veth$i src 198.18.1.$i table 20$i &&
			ip rule add pref 2$i iif lo from 198.18.1.$i to 198.18.1.$j lookup 20$i ||
			fail "cannot route veth$i"
		rdma link add rxe$i type rxe netdev veth$i || fail "rdma link add rxe$i failed"
	done
	ip rule add pref 500 lookup local && ip rule del pref 0 lookup local || fail "cannot move the local table"
	g1=$(gid rxe1 198.18.1.1) || fail "rxe1 has no RoCE v2 GID"
	g2=$(gid rxe2 198.18.1.2) || fail "rxe2 has no RoCE v2 GID"
	export RXE_VM_DEV1=rxe1 RXE_VM_IP1=198.18.1.1 RXE_VM_GID_INDEX1=$g1
	export RXE_VM_DEV2=rxe2 RXE_VM_IP2=198.18.1.2 RXE_VM_GID_INDEX2=$g2
fi

out=
for p in /sys/class/virtio-ports/*; do
	[ "$(cat $p/name 2>/dev/null)" = rxevm.out ] && out=/dev/${p##*/}
done
[ -n "$out" ] || fail "no output port"
echo "rxevm guest: devices ready, running the command" >/dev/console
# The variables the repository's tests read (verbs/ibv, cmd/ibv-pingpong):
# RXE_VM=1 says "inside the VM: a device must open".
export RXE_VM=1
cd "$RXEVM_DIR" || fail "cannot enter $RXEVM_DIR"
sh $ctl/cmd </dev/null >$out 2>&1
echo $? >$ctl/rc
off
