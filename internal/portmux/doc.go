// Package portmux shares the client port between the etcd gRPC API and
// etcd's JSON gateway, as etcd serves both on one port.
//
// It owns the accept loop of the client port's listener and, for each
// connection, the decision of which server gets it, made from the first
// bytes the client sends:
//
//   - Plaintext: a connection that opens with the HTTP/2 client preface
//     ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") goes to gRPC; one whose first
//     bytes already differ from it goes to HTTP. gRPC clients always open
//     with the preface; HTTP/1.1 clients open with a method name.
//   - TLS: the ClientHello is read (by crypto/tls itself, not by a parser of
//     ours) for the protocols the client offers with ALPN. A client that
//     offers "h2" and not "http/1.1" goes to gRPC, untouched: gRPC's own
//     credentials perform the handshake from the replayed ClientHello, so
//     the gRPC path is what it was before the port was shared. Any other
//     client (curl offers "h2" and "http/1.1"; browsers and most HTTP
//     libraries offer "http/1.1"; some offer nothing) is an HTTP client:
//     the handshake is done here with the same tls.Config, restricted to
//     "http/1.1", and the connection reaches HTTP already verified. gRPC
//     clients offer only "h2" (grpc-go, grpc-java, C-core add "grpc-exp"),
//     and gRPC refuses a connection without ALPN anyway. A connection that
//     does not open with a TLS handshake record goes to gRPC, whose
//     handshake fails and logs it as before.
//
// So both sides are held to one tls.Config: the verifier of internal/tlsconf
// checks an HTTP client's certificate exactly as a gRPC client's, and a
// client it refuses gets no byte of either API.
//
// A client that says too little to be routed within the sniff timeout is
// closed. Routing runs on its own goroutine per connection, so a slow client
// never holds up the accept loop.
//
// This package must never read or write a byte of a routed connection after
// handing it over, never parse a ClientHello itself (it looks at one byte,
// the record type, and leaves the rest to crypto/tls), never route a
// request (only whole connections), and never keep a connection or
// goroutine past Close.
package portmux
