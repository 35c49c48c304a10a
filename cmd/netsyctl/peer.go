package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/tlsconf"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// peers is netsyctl's side of the peer protocol: the peer addresses to
// try, in order, and one connection per address it dialled.
type peers struct {
	addrs []string
	// from says where addrs came from, for error messages.
	from  string
	conns map[string]*grpc.ClientConn
	// creds secure the connections: mutual TLS with a peer certificate,
	// or plaintext.
	creds credentials.TransportCredentials
	tls   bool
}

func (c *common) bindPeer(fs *flag.FlagSet) {
	fs.StringVar(&c.peerEndpoints, "peer-endpoints", "", "comma-separated peer addresses (host:port); default: the peer URLs in the member list of --endpoints")
	fs.StringVar(&c.peerCert, "peer-cert", "", "certificate presented on the peer port (mutual TLS, with --peer-key): a peer identity, such as a node's --peer-cert-file")
	fs.StringVar(&c.peerKey, "peer-key", "", "key of --peer-cert")
	fs.StringVar(&c.peerCACert, "peer-cacert", "", "verify the peer ports' certificates with this CA bundle (default: --cacert)")
}

// peerCreds are the credentials of the peer port: mutual TLS when any of
// --peer-cert, --peer-key and --peer-cacert is given (the peer port takes
// only peer identities), else plaintext. Nodes are verified by host name,
// as on the client port.
func (c *common) peerCreds() (credentials.TransportCredentials, bool, error) {
	if c.peerCert == "" && c.peerKey == "" && c.peerCACert == "" {
		return insecure.NewCredentials(), false, nil
	}
	if c.peerCert == "" || c.peerKey == "" {
		return nil, false, errors.New("--peer-cert and --peer-key: the peer port accepts only peer identities; give both")
	}
	ca := c.peerCACert
	if ca == "" {
		ca = c.cacert
	}
	cfg, err := tlsconf.ClientConfig(tlsconf.ClientOptions{
		CertFile:      c.peerCert,
		KeyFile:       c.peerKey,
		TrustedCAFile: ca,
		Clock:         clock.Real(),
	})
	if err != nil {
		return nil, false, fmt.Errorf("--peer-cert/--peer-key/--peer-cacert: %w", err)
	}
	return credentials.NewTLS(cfg), true, nil
}

// peers finds the peer addresses: --peer-endpoints as given, or else the
// peer URLs of the member list --endpoints answers, the answering member
// first.
func (c *common) peers(ctx context.Context) (*peers, error) {
	creds, secure, err := c.peerCreds()
	if err != nil {
		return nil, err
	}
	p, err := c.findPeers(ctx)
	if err != nil {
		return nil, err
	}
	p.creds, p.tls = creds, secure
	return p, nil
}

func (c *common) findPeers(ctx context.Context) (*peers, error) {
	if c.peerEndpoints != "" {
		var addrs []string
		for _, e := range strings.Split(c.peerEndpoints, ",") {
			if e = strings.TrimSpace(e); e != "" {
				addrs = append(addrs, hostPort(e))
			}
		}
		if len(addrs) == 0 {
			return nil, errors.New("--peer-endpoints: no address given")
		}
		return newPeers(addrs, "--peer-endpoints"), nil
	}
	cli, err := c.newClient()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("look up peer addresses: member list from %s: %w: check --endpoints names client addresses of running nodes, or give peer addresses with --peer-endpoints", c.endpoints, err)
	}
	addrs := peersOf(resp)
	if len(addrs) == 0 {
		return nil, fmt.Errorf("look up peer addresses: the member list from %s names no peer URLs: give peer addresses with --peer-endpoints", c.endpoints)
	}
	return newPeers(addrs, "the member list from "+c.endpoints), nil
}

func newPeers(addrs []string, from string) *peers {
	return &peers{addrs: addrs, from: from, conns: map[string]*grpc.ClientConn{}, creds: insecure.NewCredentials()}
}

// peersOf lists the members' peer addresses, the answering member's first.
func peersOf(resp *clientv3.MemberListResponse) []string {
	var first, rest []string
	seen := map[string]bool{}
	for _, m := range resp.Members {
		for _, u := range m.PeerURLs {
			a := hostPort(u)
			if a == "" || seen[a] {
				continue
			}
			seen[a] = true
			if resp.Header != nil && m.ID == resp.Header.MemberId {
				first = append(first, a)
			} else {
				rest = append(rest, a)
			}
		}
	}
	return append(first, rest...)
}

// hostPort turns a peer URL (http://10.0.0.1:2380) into the host:port the
// peer port is dialled at; a bare host:port stays as it is.
func hostPort(s string) string {
	if strings.Contains(s, "://") {
		if u, err := url.Parse(s); err == nil && u.Host != "" {
			return u.Host
		}
	}
	return s
}

func (p *peers) conn(addr string) (*grpc.ClientConn, error) {
	if cc := p.conns[addr]; cc != nil {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(p.creds))
	if err != nil {
		return nil, fmt.Errorf("peer address %q: %w", addr, err)
	}
	p.conns[addr] = cc
	return cc, nil
}

func (p *peers) close() {
	for _, cc := range p.conns {
		cc.Close()
	}
}

// answer is one node's own state and where it answered.
type answer struct {
	addr string
	self *netsyv1.NodeState
}

func (a answer) name() string {
	if id := a.self.GetInfo().GetNodeId(); id != "" {
		return id
	}
	if id := a.self.GetState().GetNodeId(); id != "" {
		return id
	}
	return a.addr
}

// anyNode asks the peer addresses in order for their node state and
// returns the first answer.
func (p *peers) anyNode(ctx context.Context) (answer, error) {
	var failed []string
	for _, addr := range p.addrs {
		cc, err := p.conn(addr)
		if err != nil {
			failed = append(failed, err.Error())
			continue
		}
		ns, err := netsyv1.NewNodeClient(cc).GetNodeState(ctx, &netsyv1.GetNodeStateRequest{})
		if err == nil {
			return answer{addr: addr, self: ns}, nil
		}
		failed = append(failed, p.explain(addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return answer{}, fmt.Errorf("no node answered on the peer addresses from %s: %s", p.from, strings.Join(failed, "; "))
}

var errNoElector = errors.New("no Elector known")

// withElector runs call against the Elector that first names. An Elector
// that answers FailedPrecondition no longer holds the role; netsyctl then
// asks that node whom it knows as the Elector and tries there, once per
// address. It returns the Elector it called last.
func (p *peers) withElector(ctx context.Context, first answer, call func(context.Context, netsyv1.ElectorClient) error) (*netsyv1.NodeInfo, error) {
	el := first.self.GetClusterState().GetElector()
	if el.GetPeerAddr() == "" {
		return nil, fmt.Errorf("%w (asked %s at %s): wait for an Elector to be elected; netsyctl cluster-state shows the node's view", errNoElector, first.name(), first.addr)
	}
	tried := map[string]bool{}
	// A node between two Electors (its own lock just lost, or the next
	// Elector not loaded yet) refuses and names an Elector already tried:
	// the refusal is asked again a few times, electorRetry apart.
	for again := 0; ; {
		addr := el.GetPeerAddr()
		tried[addr] = true
		cc, err := p.conn(addr)
		if err != nil {
			return el, err
		}
		err = call(ctx, netsyv1.NewElectorClient(cc))
		if err == nil {
			return el, nil
		}
		callErr := fmt.Errorf("Elector %s: %s", el.GetNodeId(), p.explain(addr, err))
		transient := peer.ReasonOf(err) == peer.ReasonNotElector || peer.ReasonOf(err) == peer.ReasonNotLoaded
		if status.Code(err) != codes.FailedPrecondition && !transient {
			return el, callErr
		}
		ns, nerr := netsyv1.NewNodeClient(cc).GetNodeState(ctx, &netsyv1.GetNodeStateRequest{})
		next := ns.GetClusterState().GetElector()
		if nerr == nil && next.GetPeerAddr() != "" && !tried[next.GetPeerAddr()] {
			el = next
			continue
		}
		if !transient || again >= electorRetries {
			return el, callErr
		}
		again++
		select {
		case <-clock.Real().After(electorRetry):
		case <-ctx.Done():
			return el, callErr
		}
		clear(tried)
		if next.GetPeerAddr() != "" {
			el = next
		}
	}
}

// electorRetries and electorRetry bound how long a call waits out a change
// of Elector (about two seconds: an s3lect takeover is well under that).
const (
	electorRetries = 10
	electorRetry   = 200 * time.Millisecond
)

// explain is explain with a hint at the peer port's TLS when the
// connection failed at the handshake.
func (p *peers) explain(addr string, err error) string {
	msg := explain(addr, err)
	if status.Code(err) != codes.Unavailable {
		return msg
	}
	switch text := err.Error(); {
	case !p.tls && (strings.Contains(text, "connection reset") || strings.Contains(text, "EOF") || strings.Contains(text, "http2")):
		return msg + "; if the peer port serves mutual TLS, give --peer-cert and --peer-key (a peer certificate) and --peer-cacert or --cacert"
	case p.tls && !peerRefused(err):
		// A refused certificate shows as an alert or, with TLS 1.3, as a
		// connection the node closed.
		return msg + "; the peer port accepts only peer certificates of its cluster (--peer-cert: netsy://{cluster_id}/peer/{name}) signed by a CA it trusts"
	}
	return msg
}

// peerRefused reports a connection refused: nothing listens there.
func peerRefused(err error) bool {
	return strings.Contains(err.Error(), "connection refused")
}

// explain says what failed at addr and what to check.
func explain(addr string, err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Sprintf("%s: %v", addr, err)
	}
	switch st.Code() {
	case codes.Unimplemented:
		return fmt.Sprintf("%s does not serve Netsy's peer protocol (%s): is it a client address? give peer addresses with --peer-endpoints", addr, st.Message())
	case codes.Unavailable:
		return fmt.Sprintf("%s is unreachable (%s): check the node runs and its peer port listens there", addr, st.Message())
	case codes.DeadlineExceeded:
		return fmt.Sprintf("%s did not answer within --timeout", addr)
	case codes.Canceled:
		return fmt.Sprintf("%s: canceled", addr)
	}
	return fmt.Sprintf("%s answered %s: %s", addr, st.Code(), st.Message())
}
