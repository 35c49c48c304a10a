// This nested module only fences test/k8s off from the main module: the
// testserver package is compiled inside a copy of k8s.io/apiserver (see
// run.sh), and the summary tool uses only the standard library.
module github.com/netsy-io/netsy/test/k8s

go 1.26
