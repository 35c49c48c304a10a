// Command netsy runs one Netsy node: an etcd v3 compatible key-value server.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/netsy-io/netsy/internal/gctune"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Process-wide, so here and not in Run, which tests call in-process.
	gctune.Start(os.Getenv)
	os.Exit(Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
