// Package version says which build of Netsy is running: its own version,
// the etcd API version it reports to clients, the git commit it was built
// from and the Go toolchain. cmd/netsy (--version) and cmd/netsyctl
// (version) print it.
//
// The commit comes from the linker (-ldflags "-X .../version.commit=...",
// which `make build` sets) and otherwise from the VCS stamp `go build`
// embeds in a git checkout; a build with neither says "unknown". It keeps
// no state besides those link-time strings and never reads files or the
// network.
package version
