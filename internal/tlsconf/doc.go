// Package tlsconf builds the TLS of Netsy's two ports and of the
// connections it dials, and decides who may connect.
//
// # Identities
//
// Who a certificate speaks for is its one URI SAN of the form
// netsy://{cluster_id}/{peer|client}/{name}. Host names and subjects
// identify nobody. The rules, enforced on every handshake by the
// configurations this package builds:
//
//   - The peer port accepts only peer identities of this cluster id, and
//     always requires a certificate: peers authenticate each other.
//   - The client port accepts only client identities of this cluster id.
//     With --client-cert-auth a certificate is required; without it a
//     client may connect without one, but a certificate it does present
//     is held to the same rules.
//   - A peer dialing a peer accepts only a server with a peer identity of
//     this cluster id.
//   - A certificate is accepted only if it chains to a CA of the trusted
//     CA file as that file is now, is valid at the injected clock's time,
//     and is meant for the use (client or server authentication). There is
//     no other way in: session tickets are off, so no connection resumes
//     a session verified against older files.
//
// Every refusal fails the handshake with a *RefusedError and is logged at
// warn with the identity the certificate presented (or "no netsy
// identity", "no certificate") and the reason.
//
// # Rotation
//
// Certificates, keys and CA files are read again when they change, with no
// restart and no goroutine: a handshake looks at the files if it has been
// CheckInterval since the last look, and swaps in the new content once it
// parses. A change that does not parse (a certificate written before its
// key) keeps the previous files in use and is logged once.
//
// # Versions
//
// TLS 1.3 unless TLS 1.2 is asked for by name.
//
// The package also holds the development CA behind `netsyctl certs`
// (CA, Leaf), the per-request identity for gRPC handlers
// (IdentityFromContext, UnaryRequestLog, StreamRequestLog) and the
// certificate expiry metric (NewExpiryCollector).
//
// A dialer that is not a peer (netsyctl, an etcd client) verifies the
// server the standard way, by host name, against a CA file read once.
//
// This package must never accept a peer's or a client's certificate it has
// not verified itself against the trusted CA file, never identify a peer
// or a client by host name or subject, never start a goroutine, and never
// read the wall clock: the time of every validity check comes from the
// injected clock.
package tlsconf
