// Package discovery keeps the cluster's address book in object storage:
// which nodes exist, where they listen, and the etcd member id each of them
// is known by. It owns two parts of the bucket layout and nothing else:
//
//	nodes/{node_id}.json   one registration per node, written by that node
//	members.json           cluster id, member ids and the term floors,
//	                       written only by the Elector
//
// The package is storage and rules, no process: it holds no goroutines and
// no in-memory map of the cluster. The Elector loads both objects into its
// own map before it elects anyone; node start-up calls Register; netsyctl
// and the Elector's automatic deregistration call Deregister.
//
// # Registrations
//
// A node creates its file with PutIfAbsent. Finding its own file with the
// same cluster id and addresses is a restart and succeeds. Finding other
// addresses means either two processes claim one --node-id, or the node
// restarted with another address (even only --http-addr) after a crash
// that left its file behind. RegisterTakingOver tells the two apart with
// an injected Prober: it asks the old peer address which node answers
// there. The same node id answering is a live process, and start-up stops
// with ErrConflict; anything else (no answer, another id) means the writer
// is gone, and the file is replaced with PutIfMatch on the ETag that was
// read, so of two starters racing to take it over only one can win, and
// the other then finds the winner alive. The replaced registration is
// returned for the caller to log. Without a Prober (Register) a conflict
// always stops start-up and the old entry must be removed on purpose
// (netsyctl deregister). The one field a node may change in place without
// a probe is its member name (--name, absent meaning the node id), with
// PutIfMatch on the ETag it read, so a name never replaces another node's
// addresses. Deregistering is an
// unconditional Delete; the node's member id survives in members.json. Node
// ids are restricted (ValidateNodeID) so each is one safe key segment.
//
// # members.json
//
// Invariants, enforced by MembersFile.Update before every write:
//
//   - Only the Elector writes it, and every write carries a precondition:
//     PutIfAbsent when the file was absent, PutIfMatch on the ETag that was
//     read. There is no unconditional write of members.json anywhere.
//   - Every write bumps counter, so no two bodies are equal and the ETag
//     (the MD5 of the body on MinIO) identifies one write.
//   - A member id is a random non-zero 63-bit value, unique in the file. Once
//     a node id has one it keeps it forever, through restarts and
//     deregistrations; ids are never removed, changed or given to another
//     node.
//   - primary_term is the highest Primary term ever handed out. The Elector
//     raises it with a successful CAS (NextPrimaryTerm) before it announces
//     the Primary, so a later Elector, which reads the file first, can never
//     hand the same term out again. elector_term records the highest Elector
//     term that wrote the file; neither ever goes down.
//   - The cluster id never changes. A file of another cluster, or one that
//     cannot be decoded, is an error naming the key; it is never replaced.
//
// A lost precondition means another Elector wrote in between; Update reloads
// and reapplies its change a bounded number of times, so neither write is
// lost. A write whose answer was lost may have landed: reapplying on the
// reloaded file is still correct (an id is found already assigned; a term
// increment skips a value, which is never reused).
//
// This package must never write members.json without a precondition, delete
// it, reuse a member id or a primary term, replace a registration whose
// writer answers as that node, or touch keys outside nodes/ and
// members.json.
package discovery
