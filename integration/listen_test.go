package integration

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// A port found free (listen on :0, close) can be taken before the process
// it is handed to binds it: by another process listening, or as the local
// port of an outgoing connection. So the harness hands a process
// 127.0.0.1:0 and reads the port it bound from /proc.

// listenAddr waits until process pid listens on one TCP port of
// 127.0.0.1 and returns that address; "" if the process exits first
// (exited is closed) or listens on none within a minute.
func listenAddr(pid int, exited <-chan struct{}) (string, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		addrs, err := listening(pid)
		switch {
		case err != nil:
			return "", err
		case len(addrs) == 1:
			return addrs[0], nil
		case len(addrs) > 1:
			return "", fmt.Errorf("process %d listens on %d ports (%v): the harness expects one", pid, len(addrs), addrs)
		case time.Now().After(deadline):
			return "", fmt.Errorf("process %d listens on no port after a minute", pid)
		}
		select {
		case <-exited:
			return "", nil
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// listening returns the 127.0.0.1 addresses process pid listens on: the
// LISTEN rows of /proc/net/tcp whose socket inode is one of its open
// files. A process that has exited listens on none.
func listening(pid int) ([]string, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, nil // exited (or exiting): the caller sees it exit
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return nil, nil
	}
	defer func() { _ = f.Close() }()
	var addrs []string
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		cols := strings.Fields(sc.Text())
		if len(cols) < 10 || cols[3] != "0A" || !inodes[cols[9]] { // 0A: LISTEN
			continue
		}
		ip, port, ok := strings.Cut(cols[1], ":")
		if !ok || ip != "0100007F" { // 127.0.0.1, in the host's byte order (little-endian)
			continue
		}
		n, err := strconv.ParseUint(port, 16, 16)
		if err != nil {
			return nil, fmt.Errorf("/proc/%d/net/tcp: port %q: %w", pid, port, err)
		}
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", n))
	}
	return addrs, sc.Err()
}
