package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
)

// machine describes where the numbers were taken.
type machine struct {
	Cores        int    `json:"cores"`
	CPUModel     string `json:"cpu_model"`
	MemTotal     string `json:"mem_total"`
	Kernel       string `json:"kernel"`
	GoVersion    string `json:"go_version"`
	EtcdVersion  string `json:"etcd_version"`
	T4Version    string `json:"t4_version,omitempty"`
	NetsyCommit  string `json:"netsy_commit"`
	DataFS       string `json:"data_fs"`
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
}

func describeMachine(root, etcdBin, dataDir string) machine {
	m := machine{
		Cores:        runtime.NumCPU(),
		CPUModel:     "unknown",
		GoVersion:    runtime.Version(),
		Kernel:       readTrim("/proc/sys/kernel/osrelease"),
		LoadAvgStart: loadAvg(),
		DataFS:       fsType(dataDir),
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kib int64
				if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kib); err == nil {
					m.MemTotal = fmt.Sprintf("%.1f GiB", float64(kib)/(1<<20))
				}
				break
			}
		}
	}
	if out, err := exec.Command(etcdBin, "--version").Output(); err == nil {
		// "etcd Version: 3.6.10"
		m.EtcdVersion = "etcd " + strings.TrimSpace(strings.TrimPrefix(firstLine(string(out)), "etcd Version:"))
	}
	m.NetsyCommit = gitDescribe(root)
	return m
}

func gitDescribe(root string) string {
	cmd := exec.Command("git", "rev-parse", "--short", "HEAD")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	rev := strings.TrimSpace(string(out))
	st := exec.Command("git", "status", "--porcelain", "--untracked-files=no")
	st.Dir = root
	if out, err := st.Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		rev += "-dirty"
	}
	return rev
}

func loadAvg() string {
	f := strings.Fields(readTrim("/proc/loadavg"))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func readTrim(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// fsType names the filesystem of dir; tmpfs would make fsync free and the
// comparison meaningless.
func fsType(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	switch st.Type {
	case 0x01021994:
		return "tmpfs"
	case 0xEF53:
		return "ext4"
	case 0x58465342:
		return "xfs"
	case 0x9123683E:
		return "btrfs"
	case 0x794c7630:
		return "overlayfs"
	}
	return "unknown"
}

// t4Version is the first line of `t4 version` ("t4 v1.1.17").
func t4Version(bin string) string {
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		return "t4 unknown"
	}
	return firstLine(string(out))
}
