// Package app wires dedup's components from a config file: the
// composition root, the part of cmd/dedup that integration/cmd/devstack
// shares. Nothing but cmd/dedup and the lab imports it: the config file
// and its environment binding are internal/config's, the clients and the
// start-up checks of how dedup dials internal/dial's.
//
// What it owns:
//
//   - Start-up (app.go Run, worker.go RunWorker, admin.go, deps.go): the
//     admin port first (/metrics, /livez, /readyz, pprof), then wait for
//     Kafka, PostgreSQL and Temporal; dependency state and probes. Which
//     start-up errors wait and which end the process, naming the setting:
//     refused.go.
//   - The worker's config file (workerconfig.go): only the worker,
//     postgres, temporal and log sections are read.
//   - A ledger a failover can rewind (replication.go): the server's
//     replication read at start; refused with an allow_* or signal route,
//     or a ledger kept longer than Temporal's retention, unless
//     postgres.accept_async_replication.
//   - The namespaces' search attributes at start (searchattrs.go).
//   - The Temporal SDK's and kprom's metrics, the purge loop, the
//     pending-row gauges.
//   - The version and commit (version.go: -ldflags, else the toolchain's
//     build info) in dedup version and dedup_build_info.
//
// cmd/dedup is the command line over it: one command table
// (cmd/dedup/commands.go, run by internal/cli) for dedup run, worker,
// ingress, migrate, validate, version, schedule pause|resume, dlq replay
// and the operators' commands of internal/ops; test failpoints exist only
// with -tags failpoints (cmd/dedup/failpoints.go).
package app
