// Package config holds the one Config struct of a netsy node: defaults,
// validation that names the offending field, and flag binding with
// NETSY_<NAME> environment fallbacks and an optional YAML config file
// (--config-file) whose keys are the flag names. A value comes from the
// command line, else the environment, else the file, else the default;
// ParseSettings reports which for every setting (netsy --print-config).
//
// Plaintext is for loopback: Validate refuses a client or peer port on any
// other address without TLS unless --insecure-plaintext says so.
//
// It never opens a socket, reads no file but the config file, and keeps
// no package-level mutable state.
package config
