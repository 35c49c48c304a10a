// Package heartbeat sends this node's state to the Elector on a cadence
// and judges this node's own health from whether those sends get through.
//
// It owns the sender side of the Heartbeat rule: every Interval (default
// 500 ms) one Heartbeat goes to the current Elector; a failed send is
// retried once at once, and if that fails too the node marks itself
// Degraded. It returns to Healthy by itself as soon as a send succeeds
// again, with no restart. While Config.Fast says so (the wiring says: this
// node is the Active Primary) the cadence doubles to every half interval,
// so the Primary's lease, renewed by the answers, lapses only after three
// unanswered beats in a row.
//
// It owns the node's one health decision too (Judge): the replica's
// Receipts to the Primary report to it as Heartbeats do, so a Receipt
// that fails with its one immediate retry degrades the node the same way,
// and any send of either kind that gets through makes it Healthy again
// (a dead Primary's failed receipts must not keep its replicas Degraded,
// or none could be elected). It states the receivers' rule as numbers
// (MissedBeats, DegradeWindow: Degraded after 2 missed heartbeats) but
// does not apply it: the Elector and the Primary do. Every answered send reports the time it was
// sent, by this node's monotonic clock: the Primary's lease counts from
// the send, never from the answer.
//
// When this node is the Elector the send is a local call (the wiring
// passes such a Send); it is still a heartbeat like any other, so the
// Elector judges itself by the same rule.
//
// It must never decide roles, interpret the Elector's answer beyond
// handing it on, or send anything but Heartbeats (receipts are the
// replica's to send; only their outcome comes here).
package heartbeat
