# dedup: the two commands that matter are `make dev` (the embedded stack)
# and `make test` (the whole suite). Both install what they need first.
#
# Two modules: the service at the root, and the lab in integration/ (its own
# go.mod: the dev stack, the benchmark, the end-to-end tests), which links
# the Temporal server and the plotting library so that the root does not.
# Lab commands run inside integration/.

GO ?= go
LAB = integration

.PHONY: deps dev test test-root test-lab test-short loadtest fuzz vet lint build clean bench bench-smoke bench-ledger bench-instructions model \
	rules k8s image compose compose-env compose-down stranger

# What `dedup version` and dedup_build_info report (internal/app/version.go):
# `git describe` and the commit; override with make build VERSION=v1.2.3.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS = -X github.com/dedupio/dedup/internal/app.Version=$(VERSION) -X github.com/dedupio/dedup/internal/app.Commit=$(COMMIT)

# Pinned tools, installed without root into bin/tools by `go install` (the
# first build of kustomize takes about 30 s; v5.8.3 needs Go 1.27).
TOOLS = $(CURDIR)/bin/tools
KUSTOMIZE_VERSION = v5.8.2
KUSTOMIZE = $(TOOLS)/kustomize-$(KUSTOMIZE_VERSION)/kustomize

# golangci-lint (make lint, run by make test), pinned like kustomize: the
# first build takes about two minutes. Its set is in .golangci.yml.
GOLANGCI_LINT_VERSION = v2.15.0
GOLANGCI_LINT = $(TOOLS)/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint

# PostgreSQL 15 binaries for the throwaway test clusters, when missing.
deps:
	@./.ci/deps

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/dedup ./cmd/dedup
	cd $(LAB) && $(GO) build -o ../bin/devstack ./cmd/devstack
	cd $(LAB) && $(GO) build -o ../bin/dedup-bench ./cmd/dedup-bench

# DEV_FLAGS: devstack's flags, e.g. DEV_FLAGS='-rate 200' (demo records/s;
# the default 20 is what the demo worker keeps up with on two cores).
# Built, then exec'd (not go run): make's child is devstack itself, so a
# SIGTERM (an IDE's stop button, timeout) reaches it, and make returns once
# the stack has stopped and freed its ports, as after Ctrl-C.
dev: deps
	cd $(LAB) && $(GO) build -o ../bin/devstack ./cmd/devstack && exec ../bin/devstack $(DEV_FLAGS)

# Both modules, with one config (.golangci.yml): govet, staticcheck,
# errcheck, ineffassign, unused and revive's exported-comment rule.
lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...
	cd $(LAB) && $(GOLANGCI_LINT) run --config ../.golangci.yml ./...

$(GOLANGCI_LINT):
	GOBIN=$(dir $@) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

vet:
	gofmt -l . | tee /dev/stderr | (! read -r _)
	$(GO) vet ./...
	$(GO) vet -tags failpoints ./cmd/dedup
	cd $(LAB) && $(GO) vet ./...

# The full suite: unit, ledger (real PostgreSQL), end-to-end (kfake,
# in-process Temporal, routers as processes), in two lanes side by side:
# the root module's packages, and the protocol model then the lab's
# (integration/). The model runs before the lab, which has time to spare:
# before the root module's packages it made that lane CI's longest, 12
# minutes past the lab's (a fresh clone's .ci/run took 2,502 s here). The lab's end-to-end package takes about 13 minutes on
# under one core (its scenarios wait on Temporal, Kafka and timers), the
# root lane about as long; one after the other they left a core idle for
# most of CI. Within a lane, packages run one at a time. Within a
# package, the tests that mostly wait (the router's fence tests, marked
# waitsOnTimers) run eight at a time. Each command's output is printed
# whole when it ends (--output-sync=line), so the lanes' lines never mix.
# The root module's fast packages run under the race detector only (the
# router's tests rely on it: its components share state under locks): a
# second run of the same tests without the detector cost CI five minutes.
# The rest of the root module runs without it.
RACE_PKGS = ./processor/... ./connect/... ./schemas/...
PLAIN_PKGS = $(filter-out $(shell $(GO) list $(RACE_PKGS)),$(shell $(GO) list ./...))
test: deps vet lint rules k8s stranger
	@$(MAKE) --no-print-directory -j2 --output-sync=line test-root test-lab

# make test's two lanes (each runs alone too).
test-root: deps
	$(GO) test -p 1 -count=1 -timeout 30m $(PLAIN_PKGS)
	$(GO) test -race -p 1 -parallel 8 -count=1 -timeout 10m $(RACE_PKGS)
	$(GO) test -count=1 -tags failpoints ./cmd/dedup

test-lab: deps model
	cd $(LAB) && $(GO) test -p 1 -count=1 -timeout 30m ./...

test-short: deps
	$(GO) test -short -count=1 ./processor/... ./sink/... ./internal/...

# The ingress load test alone, with its figures (requests/s, codes, peak
# RSS per process): two dedup ingress processes, 10,000 requests on
# loopback, about 20 s. make test runs it too (skipped under -short).
loadtest: deps
	$(GO) test -count=1 -run '^TestLoad$$' -v ./internal/ingress

# Package client is public: a module outside the tree
# (client/testdata/stranger: its own go.mod, with dedup replaced by this
# checkout) builds against it, enqueues through kfake and checks the
# answers, and links neither goose nor gRPC nor the Temporal SDK, nor
# expvar (its import registers /debug/vars on the default mux),
# Prometheus, the router (package processor), kadm, oauth2 or the tracing SDK. Its
# go.sum is used as committed (-mod=readonly, whatever GOFLAGS says).
# client/deps_test.go holds the same line for package client itself.
stranger:
	cd client/testdata/stranger && GOFLAGS=-mod=readonly $(GO) run .
	@cd client/testdata/stranger && GOFLAGS=-mod=readonly $(GO) list -deps . >/dev/null && \
	if GOFLAGS=-mod=readonly $(GO) list -deps . | grep -E 'goose|grpc|go.temporal.io|jackc/pgx|promhttp|dedupio/dedup/internal/|^expvar$$|prometheus/client_golang|^github.com/dedupio/dedup/processor$$|franz-go/pkg/kadm$$|golang.org/x/oauth2|go.opentelemetry.io/otel/sdk'; then \
		echo "client/testdata/stranger links the packages above: package client must not pull them"; exit 1; fi

# Prometheus (seconds): the config and the rules load, and every alert
# fires on its failure and stays quiet on a healthy series
# (deploy/prometheus/rules_test.yml). promtool comes from .ci/deps.
rules:
	@command -v promtool >/dev/null || ./.ci/deps
	promtool check config deploy/prometheus/prometheus.yml
	promtool check rules deploy/prometheus/rules.yml
	promtool test rules deploy/prometheus/rules_test.yml

# Kubernetes (seconds, once kustomize is built): the base and every overlay
# build. deploy/deploy_test.go checks what they say.
K8S_DIRS = $(sort $(dir $(wildcard deploy/k8s/base/kustomization.yaml deploy/k8s/overlays/*/kustomization.yaml)))
k8s: $(KUSTOMIZE)
	@for d in $(K8S_DIRS); do echo "kustomize build $$d"; $(KUSTOMIZE) build $$d >/dev/null || exit 1; done

$(KUSTOMIZE):
	GOBIN=$(dir $@) $(GO) install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)

# The image, with its version (needs a Docker engine; none runs here).
image:
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t dedup:dev .

# The compose demo (docker-compose.yml; needs a Docker engine). Every port
# is published on 127.0.0.1 only; Grafana asks for a login: user admin, a
# password generated once into .env (compose reads it; or set
# GRAFANA_ADMIN_PASSWORD), printed with the addresses.
compose: compose-env
	DEDUP_VERSION=$(VERSION) DEDUP_COMMIT=$(COMMIT) docker compose up --build -d
	@echo "Grafana     http://127.0.0.1:3000  (dashboard dedup; user admin, password $${GRAFANA_ADMIN_PASSWORD:-$$(sed -n 's/^GRAFANA_ADMIN_PASSWORD=//p' .env)})"
	@echo "Ingress     http://127.0.0.1:8080  (POST /v1/events)"
	@echo "Temporal UI http://127.0.0.1:8233"
	@echo "Prometheus  http://127.0.0.1:9090"

compose-env:
	@touch .env
	@grep -q '^GRAFANA_ADMIN_PASSWORD=' .env || \
		echo "GRAFANA_ADMIN_PASSWORD=$$(head -c 18 /dev/urandom | base64 | tr -d '/+=')" >>.env

compose-down:
	docker compose down

# The benchmark (docs/benchmark.md): the infrastructure pinned to CPU 0, each
# measured stage alone on CPU 1, at 0 ms and at 20 ms (Temporal) / 1 ms
# (PostgreSQL) round trips, 3 repetitions each. Sizes are flags, e.g.
# make bench BENCH_FLAGS='-reps 5 -cpuprofile bench-out/prof'.
BENCH_FLAGS ?=
bench: deps build
	bin/dedup-bench -out bench-out $(BENCH_FLAGS)

# On demand (about 45 minutes, ~45 GB of disk at its peak): claims as the
# ledger grows from 0.1M to 50M rows (random event IDs; BENCH_FLAGS='-ledger-ids
# ordered' for time-ordered ones), and the retention cost at 50M.
bench-ledger: deps build
	bin/dedup-bench -ledger-only -ledger-scale 100000,1000000,10000000,50000000 -retention-rows 50000000 -out bench-ledger-out $(BENCH_FLAGS)

# About a minute: every stage of the benchmark on tiny sizes, one repetition,
# pinned when there are two CPUs (CI runs it).
bench-smoke: deps
	cd $(LAB) && $(GO) run ./cmd/dedup-bench -smoke -out $${TMPDIR:-/tmp}/dedup-bench-smoke

# A few minutes: instructions per operation of the hot path's micro-benchmarks
# (deciding a record, a duplicate's bookkeeping, decoding), this tree against
# BASE (a commit; default HEAD), counted by valgrind: the same count on every
# run, for changes too small for CPU time on a shared machine to show.
BASE ?= HEAD
bench-instructions:
	./.ci/deps valgrind
	bash integration/bench/instructions.sh $(BASE)

# The protocol model (processor/model): every property of claim -> start ->
# mark -> commit under crashes, revokes and zombies, checked exhaustively by
# SPIN (a few minutes: 3.6 min CPU); the old in-batch rule, the review's holes and the ledger without its fence must
# still be caught; and signal routes (claim -> SignalWithStart -> mark ->
# commit, the entity workflow's seen-set): delivered at least once, observed
# at most once, and the counterexamples without the seen-set; what heals
# (a run's signal limit, dlq replay round trips): neither lost nor doubled;
# a replay's known records ended without a claim (--known).
# The default mode runs in two lanes of its own; the other four modes run
# in the two lanes of MODEL_LANES, one per core (about 90 s, then 55).
MODEL_LANES = "--bug --holes --known" "--signals --heal"
model: deps
	bash processor/model/check.sh
	@pids=; for lane in $(MODEL_LANES); do \
		(for m in $$lane; do bash processor/model/check.sh $$m >/dev/null || \
			{ echo "processor/model/check.sh $$m failed: run it alone to see why"; exit 1; }; done) & pids="$$pids $$!"; \
	done; s=0; for p in $$pids; do wait $$p || s=1; done; exit $$s

fuzz:
	$(GO) test -run XXX -fuzz FuzzDecode -fuzztime 60s ./processor/eventid
	$(GO) test -run XXX -fuzz FuzzFastJSON -fuzztime 60s ./processor/eventid

clean:
	rm -rf bin
