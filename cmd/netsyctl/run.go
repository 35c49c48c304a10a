package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/tlsconf"
	"github.com/netsy-io/netsy/internal/version"
)

const usage = `netsyctl operates Netsy nodes.

Usage: netsyctl <command> [flags]

Commands:
  cluster-state       show the Elector, the Primary, their terms and every
                      node's health, primary state, revisions, lag behind
                      the Primary and last heartbeat (--events adds the
                      event log); when the Elector does not answer, the
                      view of the node that did, marked as such
  members             list the cluster's members (with role, health and
                      revision when the Elector answers)
  deregister NODE     ask the Elector to remove NODE from the cluster; a
                      node that is not answering goes only once object
                      storage holds every entry it reported, or with
                      --force (which prints what may be lost); with the
                      cluster stopped, --storage URL deletes
                      nodes/NODE.json from the bucket itself (--force)
  handoff             ask the Elector to move the Primary role gracefully
                      (--to NODE prefers NODE); prints the new Primary, its
                      term and how long it took
  snapshot save F     stream a consistent snapshot from a node into file F
  snapshot restore F  restore snapshot file F (from netsyctl or etcdctl
                      snapshot save) into a new data directory and an empty
                      bucket: --data-dir DIR [--storage URL ...]
  restore             rebuild the state at a revision from a bucket into a
                      new data directory and an empty bucket prefix, without
                      a running cluster: --from URL (--revision R | --time T)
                      --to URL --data-dir DIR, T an RFC 3339 time (the last
                      revision committed then); the node started on them
                      serves what 'etcdctl get --rev=R' showed and continues
                      from R
                      (progress on a terminal; -o json prints the result)
  inspect F           dump a Netsy data file (segment, chunk or snapshot, or a
                      file-store object file such as objects/wal.dir/N.obj);
                      with --storage URL, F is an object key (wal/..., snapshots/...)
  repair DATA_DIR     cut the local log of a stopped node at its first
                      damaged record and print the revisions it dropped
                      (when netsy refuses to start on a damaged log)
  branch              make a new, independent database at a revision of a
                      bucket, sharing its objects instead of copying them:
                      --from URL (--revision R | --time T) --to URL; its
                      first node builds its own snapshot and releases the
                      parent's objects; 'branch list|delete --from URL'
                      show and drop the pins a parent keeps for branches
  certs init|node|client
                      create a development CA and node and client
                      certificates for a TLS cluster
  version             print the version

Finding the nodes: --endpoints takes client addresses (host:port,
comma-separated, default 127.0.0.1:2379), as for etcdctl. cluster-state,
deregister and handoff speak Netsy's peer protocol on the peer port: they
read the peer addresses from the member list (the members' peer URLs) of
the first endpoint that answers, or take them as given with
--peer-endpoints (host:port, comma-separated), which skips the client port.
Every command that talks to a node gives up after --timeout (10s; handoff
1m) and prints JSON with -o json.
Every flag can also be set through the environment variable NETSYCTL_<FLAG>
(upper case, '-' becomes '_'), as etcdctl's through ETCDCTL_<FLAG>.
TLS: --cacert, --cert and --key, as for etcdctl, on the client port. The
peer port (cluster-state, deregister, handoff) accepts only peer
identities: give a peer certificate with --peer-cert and --peer-key (and
--peer-cacert when its CA is not --cacert).

Run 'netsyctl <command> -h' for the command's flags.
`

// Run executes one netsyctl command and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmds := map[string]func(context.Context, []string, io.Writer) error{
		"cluster-state": runClusterState,
		"members":       runMembers,
		"deregister":    runDeregister,
		"handoff":       runHandoff,
		"snapshot":      runSnapshot,
		"restore":       runRestore,
		"branch":        runBranch,
		"inspect":       runInspect,
		"repair":        runRepair,
		"certs":         runCerts,
		"version":       runVersion,
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "netsyctl: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err := cmd(ctx, args[1:], stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "netsyctl %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// common holds the flags every command that talks to a node shares.
type common struct {
	endpoints     string
	peerEndpoints string
	output        string
	timeout       time.Duration
	// cacert, cert and key are etcdctl's TLS flags; with any of them set
	// every connection to a node is TLS.
	cacert, cert, key string
	// peerCert, peerKey and peerCACert secure the peer port (peer.go).
	peerCert, peerKey, peerCACert string
}

func (c *common) bind(fs *flag.FlagSet) { c.bindWith(fs, 10*time.Second) }

// bindWith is bind with a command's own default --timeout.
func (c *common) bindWith(fs *flag.FlagSet, timeout time.Duration) {
	fs.StringVar(&c.endpoints, "endpoints", "127.0.0.1:2379", "comma-separated client endpoints")
	fs.StringVar(&c.output, "o", "table", "output format: table or json")
	fs.DurationVar(&c.timeout, "timeout", timeout, "time limit for the command")
	fs.StringVar(&c.cacert, "cacert", "", "verify the nodes' certificates with this CA bundle (TLS; default: the system's CAs)")
	fs.StringVar(&c.cert, "cert", "", "present this client certificate (TLS, with --key)")
	fs.StringVar(&c.key, "key", "", "key of the --cert client certificate")
}

func (c *common) check() error {
	if c.output != "table" && c.output != "json" {
		return fmt.Errorf("-o: %q is not table or json", c.output)
	}
	if (c.cert == "") != (c.key == "") {
		return errors.New("--cert and --key: give both or neither")
	}
	return nil
}

// tlsConfig is the TLS of every connection to a node, nil for plaintext.
// Nodes are verified by host name against --cacert, as etcdctl does.
func (c *common) tlsConfig() (*tls.Config, error) {
	if c.cacert == "" && c.cert == "" && c.key == "" {
		return nil, nil
	}
	cfg, err := tlsconf.ClientConfig(tlsconf.ClientOptions{
		CertFile:      c.cert,
		KeyFile:       c.key,
		TrustedCAFile: c.cacert,
		Clock:         clock.Real(),
	})
	if err != nil {
		return nil, fmt.Errorf("--cacert/--cert/--key: %w", err)
	}
	return cfg, nil
}

// connect dials the endpoints and bounds the command by --timeout; close
// releases both.
func (c *common) connect(ctx context.Context) (cli *clientv3.Client, cctx context.Context, close func(), err error) {
	cli, err = c.newClient()
	if err != nil {
		return nil, nil, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	return cli, cctx, func() { cancel(); cli.Close() }, nil
}

func (c *common) newClient() (*clientv3.Client, error) {
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(c.endpoints, ","),
		DialTimeout: c.timeout,
		TLS:         tlsCfg,
		// The client's own JSON log lines (retries, a closed stream) must
		// not mix into netsyctl's output; its errors are returned.
		Logger: zap.NewNop(),
	})
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newFlagSet(name string, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("netsyctl "+name, flag.ContinueOnError)
	fs.SetOutput(w)
	return fs
}

// parseArgs parses flags wherever they stand among the arguments
// (`snapshot restore FILE --data-dir DIR` as well as flags first) and
// returns the positional arguments. After "--" everything is positional.
// A flag not given takes its value from the environment variable
// NETSYCTL_<FLAG> (upper case, '-' becomes '_'), as etcdctl's flags do
// from ETCDCTL_<FLAG>.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	pos, err := parseFlags(fs, args)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		if v := os.Getenv(name); v != "" && !set[f.Name] && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("--%s (from %s=%q): %w", f.Name, name, v, err)
			}
		}
	})
	return pos, envErr
}

// envName is the environment variable that backs a netsyctl flag.
func envName(flagName string) string {
	return "NETSYCTL_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag stops at the first positional argument or after "--";
		// only the arguments consumed tell the two apart.
		if consumed := args[:len(args)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func runVersion(_ context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("version", stdout)
	output := fs.String("o", "table", "output format: table or json")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return errors.New("usage: netsyctl version [-o table|json]")
	}
	switch *output {
	case "json":
		return writeJSON(stdout, version.Get())
	case "table":
		_, err := fmt.Fprint(stdout, version.Get())
		return err
	}
	return fmt.Errorf("-o: %q is not table or json", *output)
}
