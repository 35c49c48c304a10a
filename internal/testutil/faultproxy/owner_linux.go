package faultproxy

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// OwnerPID returns which of pids holds the client end of a loopback IPv4
// TCP connection whose client address is client and whose other end is
// proxy (the two addresses Options.Classify is given), or 0 when none of
// them does. It reads /proc: the socket's inode from /proc/net/tcp, then
// each candidate's file descriptors. With it a Classify function names a
// connection by the process that opened it, so a test can cut one node's
// outbound connections to its peers.
func OwnerPID(client, proxy net.Addr, pids []int) (int, error) {
	cl, ok1 := client.(*net.TCPAddr)
	px, ok2 := proxy.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("faultproxy: owner of %v -> %v: not TCP addresses", client, proxy)
	}
	inode, err := socketInode(cl.Port, px.Port)
	if err != nil {
		return 0, err
	}
	want := "socket:[" + inode + "]"
	for _, pid := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, e := range ents {
			if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == want {
				return pid, nil
			}
		}
	}
	return 0, nil
}

// socketInode finds, in /proc/net/tcp, the socket whose local port is
// local and remote port is remote (both on loopback) and returns its inode.
func socketInode(local, remote int) (string, error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return "", fmt.Errorf("faultproxy: %w", err)
	}
	defer f.Close()
	l := fmt.Sprintf(":%04X", local)
	r := fmt.Sprintf(":%04X", remote)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || !strings.HasSuffix(fs[1], l) || !strings.HasSuffix(fs[2], r) {
			continue
		}
		if _, err := strconv.ParseUint(fs[9], 10, 64); err == nil && fs[9] != "0" {
			return fs[9], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("faultproxy: read /proc/net/tcp: %w", err)
	}
	return "", fmt.Errorf("faultproxy: no socket %d -> %d in /proc/net/tcp", local, remote)
}

// ChildPIDs lists the processes whose parent is parent, from /proc. A test
// that starts its servers as child processes passes them to OwnerPID, so a
// connection is named by its process even while that process is still
// starting.
func ChildPIDs(parent int) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fs := strings.Fields(s[i+1:])
		if len(fs) >= 2 && fs[1] == strconv.Itoa(parent) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
