package procutil

import "sync"

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
		kubeDir, kubeErr = runBuildScript(root, "build-kube.sh")
	})
	return kubeDir, kubeErr
}
