// Package node wires one netsy process together: the data directory and its
// identity, the local log, the engine, the etcd client API and the HTTP
// health and metrics endpoints. It owns start-up order and shutdown order;
// it implements no database behaviour itself.
//
// It also puts the TLS that internal/tlsconf builds on the ports (tls.go):
// the client port accepts client identities, the peer port and every
// connection to a peer peer identities of this cluster. A request that a
// node forwards to the Primary goes over the peer port under the
// forwarding node's peer identity; the client's own identity was checked
// by the node it connected to. The HTTP port stays plaintext: it serves
// health, metrics, profiles and the read-only cluster view, never keys or
// values.
package node
