package procutil

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

var (
	kubeOnce sync.Once
	kubeDir  string
	kubeErr  error
)

// KubeBinDir returns the directory holding kube-apiserver and kubectl,
// running scripts/build-kube.sh (a no-op when they are already built) once
// per process. A cold build takes minutes; `make tools` does it ahead.
func KubeBinDir() (string, error) {
	kubeOnce.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			kubeErr = err
			return
		}
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "build-kube.sh"))
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			kubeErr = fmt.Errorf("scripts/build-kube.sh: %w\n%s", err, stderr.Bytes())
			return
		}
		var last string
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); l != "" {
				last = l
			}
		}
		if last == "" {
			kubeErr = errors.New("scripts/build-kube.sh printed no directory")
			return
		}
		kubeDir = last
	})
	return kubeDir, kubeErr
}
