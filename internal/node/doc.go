// Package node wires one netsy process together: the data directory and its
// identity, the local log, the engine, the etcd client API and the HTTP
// health and metrics endpoints. It owns start-up order and shutdown order;
// it implements no database behaviour itself.
package node
