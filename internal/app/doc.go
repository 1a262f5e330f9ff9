// Package app wires dedup's components from a config file: the
// composition root, the part of cmd/dedup that integration/cmd/devstack
// shares (dedup run and dedup worker, their start-up order, checks and
// refusals, the admin port). Nothing but cmd/dedup and the lab imports it:
// the config is internal/config's, the clients internal/dial's.
package app
