package miniotest

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel kill MinIO if the test binary dies
// without running its cleanups (a panic or go test's timeout).
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
