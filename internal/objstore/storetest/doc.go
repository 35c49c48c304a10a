// Package storetest is the conformance suite for objstore.Store. Every
// backend's tests call Run, so mem, fs and s3 (against a real MinIO) are held
// to the single contract written in package objstore's documentation; a
// behaviour the rest of Netsy relies on belongs here, not in one backend's
// tests.
//
// It must never depend on a particular backend or on wall-clock timing: races
// are decided by the store, not by sleeps.
package storetest
