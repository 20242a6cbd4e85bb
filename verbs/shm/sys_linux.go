//go:build linux

package shm

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/rdmago/rdmago/internal/hostid"
	"golang.org/x/sys/unix"
)

// memfd creates an anonymous shared-memory file of size bytes. It has no
// name in any file system (nothing to leave behind in /dev/shm) and lives
// as long as a descriptor or a mapping refers to it. The size is virtual:
// pages are allocated when first touched and returned by punchHole.
func memfd(name string, size int64) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("ftruncate memfd to %d bytes: %w", size, err)
	}
	// Sealed against shrinking, so no peer that holds the descriptor can
	// truncate it under our mappings (which would turn accesses into SIGBUS).
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, requiredSeals|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sealing memfd: %w", err)
	}
	return fd, nil
}

const requiredSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

// sealed reports whether a peer's memfd cannot shrink under our mapping.
func sealed(fd int) bool {
	s, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	return err == nil && s&requiredSeals == requiredSeals
}

// mapShared maps size bytes of fd read-write and shared.
func mapShared(fd int, size int64) ([]byte, error) {
	b, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", size, err)
	}
	return b, nil
}

// punchHole releases the pages of [off, off+n) of fd; they read as zero afterwards.
func punchHole(fd int, off, n int64) error {
	return unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}

// hostIdentity is internal/hostid's identity (kernel boot id plus network
// namespace): two processes share memory cheaply and reach each other's
// abstract Unix sockets exactly when both match.
func hostIdentity() (string, error) {
	id, err := hostid.ID()
	if err != nil {
		return "", fmt.Errorf("%w: %v", errUnavailable, err)
	}
	return id, nil
}

// cmaCopy moves bytes between local buffers and one remote range of process
// pid with process_vm_readv/writev, looping on short transfers, at most
// cmaCallMax bytes a call.
func cmaCopy(pid int, local [][]byte, remote uint64, write bool) error {
	var iovs [16]unix.Iovec
	locals := iovs[:0]
	total := 0
	for _, b := range local {
		if len(b) == 0 {
			continue
		}
		var v unix.Iovec
		v.Base = &b[0]
		v.SetLen(len(b))
		locals = append(locals, v)
		total += len(b)
	}
	trap := uintptr(unix.SYS_PROCESS_VM_READV)
	if write {
		trap = unix.SYS_PROCESS_VM_WRITEV
	}
	for total > 0 {
		r := [1]unix.RemoteIovec{{Base: uintptr(remote), Len: min(total, cmaCallMax)}}
		n, err := cmaCall(trap, pid, locals, r[:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return fmt.Errorf("process_vm_%s moved no bytes", map[bool]string{true: "writev", false: "readv"}[write])
		}
		total -= n
		remote += uint64(n)
		for n > 0 && len(locals) > 0 {
			l := int(locals[0].Len)
			if n >= l {
				n -= l
				locals = locals[1:]
				continue
			}
			locals[0].Base = (*byte)(unsafe.Add(unsafe.Pointer(locals[0].Base), n))
			locals[0].SetLen(l - n)
			n = 0
		}
	}
	return nil
}

// cmaCallMax bounds one cmaCall, about 200 µs of copying at 20 GB/s: the
// longest the calling goroutine keeps its P from the scheduler (a stop
// of the world waits for it, and under GOMAXPROCS=1 every goroutine of
// the process does).
const cmaCallMax = 4 << 20

// cmaCall is one process_vm_readv or process_vm_writev (trap), made
// without telling Go's scheduler (RawSyscall6). Through syscall.Syscall,
// a call longer than sysmon's 20 µs tick (a rendezvous's copy: 25 µs at
// 512 KiB) saw its P handed to another thread, woken to run nothing: a
// bibw window of such copies kept sysmon at its shortest tick and
// preempted the copying thread thousands of times a second, and with both
// CPUs copying, the preempted rank's copies ran at 17-19 GB/s against its
// peer's 23-28 (a C program's, 24-29). Raw, bibw from 512 KiB to 4 MiB
// ran 1.20-1.45 times as fast (osu-compare, 7 rounds); 512 KiB calls in
// a loop cost about 60 thread wake-ups per 4000 instead of 550-600.
func cmaCall(trap uintptr, pid int, local []unix.Iovec, remote []unix.RemoteIovec) (int, error) {
	n, _, e := unix.RawSyscall6(trap, uintptr(pid), uintptr(unsafe.Pointer(&local[0])), uintptr(len(local)),
		uintptr(unsafe.Pointer(&remote[0])), uintptr(len(remote)), 0)
	if e != 0 {
		return int(n), e
	}
	return int(n), nil
}

// word64 is the 8-byte word at b[off:], which must be 8-byte aligned.
func word64(b []byte, off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&b[off])) }

// word32 is the 4-byte word at b[off:].
func word32(b []byte, off uint64) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }

func uintptrOf(p *uint64) uintptr { return uintptr(unsafe.Pointer(p)) }
