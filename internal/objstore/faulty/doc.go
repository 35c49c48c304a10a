// Package faulty decorates an objstore.Store to fail or delay chosen calls,
// so other packages can test how they survive a flaky or slow object store:
// "fail every PutIfAbsent under wal/ until I say stop", "delay the next Get
// of leader/ by two lease periods", "let the write land but report an error
// (a lost response)". Faults are chosen by method and key prefix, may be
// count-limited, and are added and stopped at any time while the code under
// test runs. Delays wait on the injected clock, so with clock.Fake a test
// decides exactly when a delayed call proceeds (Fake.BlockUntil shows the
// call is waiting; Advance releases it).
//
// This package must never be used outside tests, and never changes what the
// inner store stores except by letting or not letting a call through.
package faulty
