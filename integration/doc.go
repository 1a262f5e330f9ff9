// Package integration holds dedup's end-to-end tests: real kfake, a real
// in-process Temporal server and a real PostgreSQL, with routers running
// in-process or as separate OS processes (the dedup binary, built once per
// test run) where a test needs real crashes.
package integration
