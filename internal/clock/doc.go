// Package clock is the only place that reads the wall clock or starts real
// timers. Every other package takes a Clock, so tests of leases, heartbeats,
// degradation and elections advance a Fake instead of sleeping.
package clock
