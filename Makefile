# dedup: the two commands that matter are `make dev` (the embedded stack)
# and `make test` (the whole suite). Both install what they need first.

GO ?= go

.PHONY: deps dev test test-short fuzz vet build clean

# PostgreSQL 15 binaries for the throwaway test clusters, when missing.
deps:
	@./.ci/deps

build:
	$(GO) build -o bin/dedup ./cmd/dedup
	$(GO) build -o bin/devstack ./cmd/devstack

dev: deps
	$(GO) run ./cmd/devstack

vet:
	gofmt -l . | tee /dev/stderr | (! read)
	$(GO) vet ./...

# The full suite: unit, ledger (real PostgreSQL), end-to-end (kfake,
# in-process Temporal, routers as processes). Packages run one at a time:
# the machine has 2 cores and the end-to-end package is heavy.
test: deps vet
	$(GO) test -p 1 -count=1 -timeout 30m ./...

test-short: deps
	$(GO) test -short -count=1 ./processor/... ./sink/... ./internal/...

fuzz:
	$(GO) test -run XXX -fuzz FuzzDecode -fuzztime 60s ./processor/eventid

clean:
	rm -rf bin
