package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/node"
	"github.com/netsy-io/netsy/internal/version"
)

const usage = `netsy runs a Netsy node: an etcd v3 compatible key-value server.

With no flags it serves the etcd API on 127.0.0.1:2379 and keeps its data
under ./netsy-data. Every flag can also be set through the environment
variable NETSY_<FLAG> (upper case, '-' becomes '_') and in the YAML file
named by --config-file, whose keys are the flag names. A flag on the
command line wins over the environment, which wins over the file;
--print-config shows every setting and where it came from.

Plaintext is served only on loopback addresses: on any other address the
client port needs --cert-file and --key-file, and the peer port
--peer-cert-file, --peer-key-file and --peer-trusted-ca-file (or
--insecure-plaintext).

Flags:
`

// Run starts a node and blocks until ctx is done, returning the exit code.
// stdout gets only what was asked for (--version); logs go to stderr.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("netsy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	showVersion := fs.Bool("version", false, "print the version and exit")
	printConfig := fs.Bool("print-config", false, "print the effective configuration (a config file, with each value's source) and exit")
	cfg, settings, err := config.ParseSettings(fs, args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if *showVersion {
		// Before validation: --version must work whatever else is set.
		fmt.Fprint(stdout, version.Get())
		return 0
	}
	if *printConfig && settings != nil {
		// Also when validation failed: seeing the values is how to tell why.
		if werr := config.WriteSettings(stdout, settings); werr != nil {
			fmt.Fprintf(stderr, "netsy: %v\n", werr)
			return 1
		}
		if err == nil {
			return 0
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "netsy: %v\n", err)
		return 2
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       "netsy",
		Level:      hclog.LevelFromString(cfg.LogLevel),
		JSONFormat: cfg.LogFormat == "json",
		Output:     stderr,
	})
	n, err := node.Start(ctx, cfg, logger, clock.Real())
	if err != nil {
		logger.Error("start failed", "error", err)
		return 1
	}
	<-ctx.Done()
	logger.Info("shutting down")
	if err := n.Close(); err != nil {
		logger.Error("shutdown", "error", err)
		return 1
	}
	logger.Info("stopped")
	return 0
}
