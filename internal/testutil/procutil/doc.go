// Package procutil starts and stops real server processes (the netsy binary
// and etcd) for end-to-end, Kubernetes and benchmark harnesses.
//
// It owns: picking loopback ports, building the netsy binary once per test
// binary, locating the pinned etcd tools, and the lifecycle of every process
// it starts. Each process is tied to the test that started it: it is stopped
// in t.Cleanup, it dies with the test binary even when the binary is killed
// by a timeout (parent-death signal), and its output goes to a log file whose
// tail is printed when the test fails.
//
// It must never be imported by production code, and it never leaves a
// process running after the test that started it has finished.
package procutil
