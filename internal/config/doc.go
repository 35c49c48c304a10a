// Package config holds the one Config struct of a netsy node: defaults,
// validation that names the offending field, and flag binding with
// NETSY_<NAME> environment fallbacks. It never opens files or sockets and
// keeps no package-level mutable state.
package config
