# dedup: the two commands that matter are `make dev` (the embedded stack)
# and `make test` (the whole suite). Both install what they need first.
#
# Two modules: the service at the root, and the lab in integration/ (its own
# go.mod: the dev stack, the benchmark, the end-to-end tests), which links
# the Temporal server and the plotting library so that the root does not.
# Lab commands run inside integration/.

GO ?= go
LAB = integration

.PHONY: deps dev test test-short fuzz vet build clean bench bench-smoke model

# PostgreSQL 15 binaries for the throwaway test clusters, when missing.
deps:
	@./.ci/deps

build:
	$(GO) build -o bin/dedup ./cmd/dedup
	cd $(LAB) && $(GO) build -o ../bin/devstack ./cmd/devstack
	cd $(LAB) && $(GO) build -o ../bin/dedup-bench ./cmd/dedup-bench

dev: deps
	cd $(LAB) && $(GO) run ./cmd/devstack

vet:
	gofmt -l . | tee /dev/stderr | (! read -r _)
	$(GO) vet ./...
	$(GO) vet -tags failpoints ./cmd/dedup
	cd $(LAB) && $(GO) vet ./...

# The full suite: unit, ledger (real PostgreSQL), end-to-end (kfake,
# in-process Temporal, routers as processes). Packages run one at a time:
# the machine has 2 cores and the end-to-end package is heavy. The root
# module first, then the lab's (integration/).
test: deps vet model
	$(GO) test -p 1 -count=1 -timeout 30m ./...
	$(GO) test -count=1 -tags failpoints ./cmd/dedup
	cd $(LAB) && $(GO) test -p 1 -count=1 -timeout 30m ./...

test-short: deps
	$(GO) test -short -count=1 ./processor/... ./sink/... ./internal/...

# A short benchmark run (a few minutes); the full one is plain
# `bin/dedup-bench -out bench-out` (see README, Performance).
bench: deps build
	bin/dedup-bench -records 3000 -replay 100000 -ledger-sizes 100000,1000000 -rss-backlog 200000 -out bench-out

# Seconds: every stage of the benchmark on tiny sizes (CI runs it).
bench-smoke: deps
	cd $(LAB) && $(GO) run ./cmd/dedup-bench -smoke -out $${TMPDIR:-/tmp}/dedup-bench-smoke

# The protocol model (processor/model): every property of claim -> start ->
# mark -> commit under crashes, revokes and zombies, checked exhaustively by
# SPIN (about a minute); and the old in-batch rule must still be caught.
model: deps
	bash processor/model/check.sh
	bash processor/model/check.sh --bug >/dev/null

fuzz:
	$(GO) test -run XXX -fuzz FuzzDecode -fuzztime 60s ./processor/eventid
	$(GO) test -run XXX -fuzz FuzzFastJSON -fuzztime 60s ./processor/eventid

clean:
	rm -rf bin
