package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// userHZ is the unit of utime and stime in /proc/PID/stat. Linux reports
// them in USER_HZ, which is 100 on every architecture it exposes to user
// space (sysconf(_SC_CLK_TCK) returns it; reading it needs cgo).
const userHZ = 100

// procStatCPU parses the contents of /proc/PID/stat and returns utime +
// stime in seconds: the CPU the process's threads spent in user and
// kernel mode, its children's excluded. The command name (field 2) is in
// parentheses and may itself hold spaces and parentheses, so the fields
// are counted from the last ')'.
func procStatCPU(stat []byte) (float64, error) {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, errors.New("no ')' after the command name")
	}
	// After the name: state (field 3) ... utime (14), stime (15).
	f := bytes.Fields(stat[end+1:])
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("%d fields after the command name, want more than %d", len(f), stime)
	}
	u, err := strconv.ParseUint(string(f[utime]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	s, err := strconv.ParseUint(string(f[stime]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return float64(u+s) / userHZ, nil
}

// procCPU reads the user + system CPU seconds of a running process.
func procCPU(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	v, err := procStatCPU(data)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return v, nil
}

// cpuPer1k is cpuSecs per 1000 operations; nil without both numbers.
func cpuPer1k(cpuSecs *float64, ops float64) *float64 {
	if cpuSecs == nil || ops <= 0 {
		return nil
	}
	v := *cpuSecs / ops * 1000
	return &v
}

// cpuMeter takes the CPU time of every server process of a deployment
// (and of the harness's MinIO, for targets that use it) before the
// measured part of a workload, to subtract from the same processes' CPU
// time after it.
type cpuMeter struct {
	pids   []int
	before []float64
	err    error

	minioPID    int
	minioBefore float64
}

// startCPU samples d's processes, and MinIO's when withMinIO. A failure
// is kept and reported by stop.
func startCPU(d *deployment, m *minioServer, withMinIO bool) *cpuMeter {
	cm := &cpuMeter{}
	for _, s := range d.nodes {
		pid := s.PID()
		if pid == 0 {
			cm.err = fmt.Errorf("%s is not running", s.label())
			return cm
		}
		v, err := procCPU(pid)
		if err != nil {
			cm.err = fmt.Errorf("%s: %w", s.label(), err)
			return cm
		}
		cm.pids, cm.before = append(cm.pids, pid), append(cm.before, v)
	}
	if withMinIO && m != nil {
		if pid := m.pid(); pid != 0 {
			if v, err := procCPU(pid); err == nil {
				cm.minioPID, cm.minioBefore = pid, v
			}
		}
	}
	return cm
}

// stop samples the same processes again and returns the CPU seconds the
// servers spent together since start, and MinIO's (nil when not
// measured). A server that exited or was replaced since start (another
// pid) makes the servers' number unknown.
func (cm *cpuMeter) stop(d *deployment) (servers, minio *float64, err error) {
	if cm.err != nil {
		return nil, nil, cm.err
	}
	if cm.minioPID != 0 {
		if v, err := procCPU(cm.minioPID); err == nil {
			dv := v - cm.minioBefore
			minio = &dv
		}
	}
	total := 0.0
	for i, s := range d.nodes {
		if pid := s.PID(); pid != cm.pids[i] {
			return nil, minio, fmt.Errorf("%s: pid %d at the start, %d at the end", s.label(), cm.pids[i], pid)
		}
		v, err := procCPU(cm.pids[i])
		if err != nil {
			return nil, minio, fmt.Errorf("%s: %w", s.label(), err)
		}
		total += v - cm.before[i]
	}
	return &total, minio, nil
}
