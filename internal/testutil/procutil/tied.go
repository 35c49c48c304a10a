package procutil

import (
	"os/exec"
	"runtime"
	"syscall"
)

// StartTied starts cmd so that the kernel SIGKILLs it if the test binary
// dies before reaping it (for example on a `go test -timeout` panic, when no
// cleanup runs). The returned channel receives cmd.Wait's result once.
//
// Tying works through the parent-death signal, which Linux sends when the
// forking OS thread exits rather than the process. The fork therefore
// happens on a thread locked for the child's whole life; the goroutine
// returns still locked, which retires that thread only after the child is
// reaped.
func StartTied(cmd *exec.Cmd) (<-chan error, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	started := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}

// RunTied is cmd.Run with the guarantee of StartTied.
func RunTied(cmd *exec.Cmd) error {
	done, err := StartTied(cmd)
	if err != nil {
		return err
	}
	return <-done
}
