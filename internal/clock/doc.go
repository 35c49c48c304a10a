// Package clock is the only place that reads the wall clock or starts real
// timers. Every other package takes a Clock, so tests of leases, heartbeats,
// degradation and elections advance a Fake instead of sleeping.
//
// A Clock has two readings, and which one a caller takes is a correctness
// question (SPEC §5.4: every lease, timeout and deadline uses monotonic
// clocks; a wall-clock step on any node changes no decision):
//
//   - Now (and Since, timers, tickers) is for measuring: leases, timeouts,
//     deadlines, staleness, "silent for how long". On the real clock it is
//     time.Now with Go's monotonic reading, which only Sub, Since, Before,
//     After and Equal between two such readings use. Keep the time.Time as
//     it is: UnixNano, Unix, Round(0), time.Unix, marshalling or sending it
//     to another node turn it into a wall reading, and a deadline built
//     from one moves when the host's clock is stepped. A Now reading means
//     nothing to another process.
//   - Wall is for telling the time: log fields, start times and
//     timestamps that are persisted or sent to another node. It may step
//     either way; never compare it to decide anything. A node judges
//     another node's liveness by when it heard from it on its own Now, not
//     by the timestamp the other node wrote.
//
// Fake models both: Advance moves every reading and fires timers, StepWall
// moves Wall alone, so a test can step the wall clock and show that no
// decision changed. A simulation clock with its own offset and rate should
// do the same: a rate and an offset apply to both readings, a step to Wall
// only.
//
// It must never be bypassed: time.Now, time.Since, time.Sleep, time.After
// and time.NewTicker/NewTimer appear nowhere else in the module.
package clock
