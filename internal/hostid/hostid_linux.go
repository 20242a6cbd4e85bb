package hostid

import (
	"bytes"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func kernel() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("%w: reading the kernel boot id: %v", ErrUnavailable, err)
	}
	return string(bytes.TrimSpace(b)), nil
}

func identity() (string, error) {
	k, err := kernel()
	if err != nil {
		return "", err
	}
	// The calling thread's namespace: a thread locked into another one
	// (setns) is, for what it dials and listens on, on that other host.
	var st unix.Stat_t
	err = unix.Stat("/proc/thread-self/ns/net", &st)
	if err != nil {
		err = unix.Stat("/proc/self/ns/net", &st)
	}
	if err != nil {
		return "", fmt.Errorf("%w: stat of the network namespace: %v", ErrUnavailable, err)
	}
	return fmt.Sprintf("%s%s%d:%d", k, netnsSep, st.Dev, st.Ino), nil
}
