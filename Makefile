# tide's build. `make help` lists the targets.
GO      ?= go
BIN     ?= bin/tide
PKGS    ?= ./...
# Tests that start servers and agents run one package at a time on this
# 2-core machine; -race catches data races in the controller and agent.
# The timeout only catches a hang: internal/server takes 7-8 minutes on a
# quiet machine (455 s on PostgreSQL) and took over 20 at load 20-26 (a
# clean-clone run of session 36 timed out so, no test failing before it).
TESTFLAGS ?= -race -count=1 -timeout 30m -p 2
# How long `make fuzz` runs each fuzz target: executions (1000000x) or a duration.
FUZZTIME ?= 1000000x

.PHONY: help build test test-python test-short bench fuzz chaos vet fmt demo studio-vendor studio-screenshots clean

help: ## List the targets.
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## Build bin/tide.
	$(GO) build -o $(BIN) ./cmd/tide

# The end-to-end tests of internal/server run a second time on PostgreSQL,
# beside the first pass: they mostly wait on servers, agents and jobs, so the
# two passes share the cores well (its output is printed when it ends).
test: vet build ## Run every test, and the end-to-end tests on PostgreSQL beside them (.ci/run installs it).
	@mkdir -p bin; rc=0; \
	echo "internal/server on PostgreSQL: started beside the other tests; its output follows theirs"; \
	TIDE_TEST_STORE=postgres $(GO) test $(TESTFLAGS) -skip 'TestReplicasFailover|FuzzComputeRequest' ./internal/server >bin/test-postgres.log 2>&1 & pg=$$!; \
	$(GO) test $(TESTFLAGS) $(PKGS) || rc=1; \
	$(MAKE) test-python || rc=1; \
	wait $$pg || rc=1; \
	echo "--- internal/server on PostgreSQL (bin/test-postgres.log):"; cat bin/test-postgres.log; \
	exit $$rc

test-python: build ## Run the Python SDK's tests against a real server (bin/tide).
	cd sdk/python && TIDE_BIN=$(CURDIR)/$(BIN) /usr/bin/python3 -m unittest discover -s tests -v

test-short: ## Run the fast unit tests only.
	$(GO) test -short -count=1 $(PKGS)

bench: ## Compare tide with Slurm and fork/exec (installs slurm-wlm, munge), measure 10,000 simulated nodes, then run the Go benchmarks.
	bench/setup.sh
	TIDE_BENCH=full $(GO) test -count=1 -v -timeout 120m -run '^(TestBench|TestScale)$$' ./bench
	GOMAXPROCS=1 $(GO) test -run '^$$' -bench . -benchmem ./internal/autoscaler ./internal/scheduler
	$(GO) test -run '^$$' -bench . -benchmem ./internal/store/...
	$(GO) test -run '^$$' -bench . -benchtime 200x ./internal/server
	GOMAXPROCS=1 $(GO) test -run '^$$' -bench Philly -benchtime 3x ./internal/simulate
	$(GO) test -run '^$$' -bench InputStart -benchtime 3x ./internal/agent/runtime
	$(GO) test -run '^$$' -bench CachedInputStart -benchtime 3x ./internal/agent

chaos: ## The full chaos suite (1,000 jobs through server kills and replica failovers, preemption storms on 200 nodes and at a preemption_rate, partitions, a capacity outage, a full disk); prints its table.
	TIDE_CHAOS=full $(GO) test -count=1 -v -timeout 90m ./internal/chaos

fuzz: ## Run every fuzz target to a million executions (FUZZTIME=..., FUZZPARALLEL=2 workers, FUZZ=regexp of targets); corpora kept in testdata/fuzz.
	GO=$(GO) FUZZTIME=$(FUZZTIME) .ci/fuzz

vet: ## go vet and a gofmt check.
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

demo: build ## Run tide's main job: a cluster that scales 0 -> 2 -> 0 around example jobs.
	$(BIN) demo

studio-vendor: ## Re-fetch Studio's chart library (uPlot) from npm into internal/studio/assets/vendor.
	internal/studio/vendor.sh

studio-screenshots: ## Drive Studio in headless Chromium and save its pages at 1280 and 390 px in docs/studio/.
	TIDE_STUDIO_SCREENSHOTS=$(CURDIR)/docs/studio $(GO) test -count=1 -run '^TestStudio$$' ./internal/server

clean: ## Remove build output.
	rm -rf bin
