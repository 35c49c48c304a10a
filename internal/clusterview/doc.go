// Package clusterview turns the peer protocol's Cluster State into what an
// operator reads: the JSON of netsyctl -o json and of the HTTP endpoints
// /cluster/state and /cluster/leader, and the table netsyctl cluster-state
// prints. netsyctl and the node share it, so both say the same thing in
// the same words.
//
// It owns presentation only. It never dials a node, never decides or
// corrects a role, keeps no state between calls and reads no clock: ages
// are the ones the Elector measured on its own clock when it answered, and
// event times are printed as their reporter logged them. Rendering the
// same answer twice gives the same bytes, which the golden tests rely on.
//
// The HTTP handlers know nothing of the node: the node hands them a
// function that returns its current Cluster State and its own Node State.
package clusterview
