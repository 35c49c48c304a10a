// Command netsyctl is the operator CLI of Netsy.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc/grpclog"
)

func main() {
	// gRPC's own log lines (connection attempts) must not mix into the
	// output; the errors they describe are returned and printed. Setting
	// GRPC_GO_LOG_SEVERITY_LEVEL keeps them for debugging.
	if os.Getenv("GRPC_GO_LOG_SEVERITY_LEVEL") == "" {
		grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, io.Discard))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(Run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
