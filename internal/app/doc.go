// Package app wires dedup's components from a config file: the part of
// cmd/dedup that integration/cmd/devstack shares. It binds the file and the
// environment; the components themselves only see their Config structs.
//
// It is the composition root; what it owns:
//
//   - The config file and its environment binding: ${VAR} in values only,
//     *_file secrets, unknown keys refused (config.go); the ingress's
//     section (ingress.go).
//   - How dedup dials (dial.go): every Kafka client's options (TLS, SASL)
//     and the start-up check that stops on a refused login or handshake;
//     the Temporal client's (mTLS, API key). The operators' tools get their
//     clients the same way (tools.go), the producer client from the config
//     file too (client.go).
//   - Start-up (app.go Run, worker.go RunWorker, admin.go, deps.go): the
//     admin port first (/metrics, /livez, /readyz, pprof), then wait for
//     Kafka, PostgreSQL and Temporal; dependency state and probes. Which
//     start-up errors wait and which end the process, naming the setting:
//     refused.go.
//   - The replay horizon at start (horizon.go): the ledger's retention
//     against the topics'; ReadHorizon and Horizon.Check also bound
//     dedup ledger purge.
//   - A ledger a failover can rewind (replication.go): the server's
//     replication read at start; refused with an allow_* or signal route,
//     or a ledger kept longer than Temporal's retention, unless
//     postgres.accept_async_replication.
//   - The Temporal SDK's and kprom's metrics, the purge loop, the
//     pending-row gauges.
//   - The version and commit (version.go: -ldflags, else the toolchain's
//     build info) in dedup version and dedup_build_info.
//
// cmd/dedup is the command line over it: dedup run, worker, ingress,
// migrate, validate, version, schedule pause|resume, signals, and the
// dispatch to internal/ops; test failpoints exist only with -tags
// failpoints (cmd/dedup/failpoints.go).
package app
