//go:build !linux

package miniotest

import "os/exec"

// setParentDeathSignal has no portable equivalent; t.Cleanup still stops MinIO.
func setParentDeathSignal(*exec.Cmd) {}
