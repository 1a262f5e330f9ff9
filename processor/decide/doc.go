// Package decide is the router's decision of one record, pure (no I/O but
// the tenant keyring's file, no clock): a Kafka record → its event and
// event ID (package eventid) → the routes it matches → their workflow IDs
// or signal delivery keys (workflowid.go) → a Decision (Decider.Decide),
// and, once the ledger answers, each copy's verdict (ClaimVerdict in
// verdict.go). It reads a narrow Config (event ID rules, routes, value
// limit, no_route, tenant keyring), not the router's. The router
// (package processor), the ledgers (sink/ledger, the router tests' fake),
// the operators' tools, the ingress and the producer client (package
// client) all import it, so they decide alike; it imports none of them,
// and links neither Prometheus nor the router, so a producer that imports
// it registers nothing.
package decide
