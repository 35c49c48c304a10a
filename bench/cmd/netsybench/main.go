// Command netsybench runs the same etcd benchmark workloads against Netsy
// and etcd (and, as clusters, t4) on this machine and reports the results
// side by side as ratios, with each target's server CPU seconds per 1000
// operations read from /proc.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
