# mlops-platform developer entry points. `make demo` and `make test` are the two README commands.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CLI := $(BIN)/mlops-platform
# `make test` runs on its own cluster so it never disturbs a demo cluster.
TEST_CLUSTER ?= mlops-test
DEMO_CLUSTER ?= mlops-dev

.PHONY: help venv binaries cluster-up cluster-down demo test lint unit integration e2e fmt clean bench bench-smoke bench-node bench-serving bench-wake bench-analysis bench-conversion test-conversion test-reliability test-durations test-balance

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required")'
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	@echo "installing Python dependencies into $(VENV)"
	@$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

venv: $(VENV)/.installed ## create .venv with the package and dev tools

binaries: ## build (or reuse cached) etcd, kube-*, kubectl, kwok, the real node's kubelet, containerd, CNI..., the monitoring stack from pinned Go modules; the node's Debian packages
	@hack/install-node-packages
	@hack/build-control-plane
	@hack/build-monitoring

cluster-up: venv binaries ## start the local control plane (idempotent)
	@$(CLI) dev up --name $(DEMO_CLUSTER)

cluster-down: venv ## stop the local control plane; no process is left behind
	@$(CLI) dev down --name $(DEMO_CLUSTER)

demo: venv ## the main job: local cluster, model store, CRD, operator, samples (left running), real predictions
	@hack/install-node-packages
	@# only what the demo runs (no promtool, fake-gcs-server, Traefik); the images made of Debian and
	@# PyPI packages build meanwhile (downloads and dpkg beside the Go compiler)
	@$(CLI) dev build-images mlserver mlops-platform > /dev/null & images=$$!; \
	  rc=0; hack/build-control-plane --demo || rc=$$?; wait $$images || rc=$$?; exit $$rc
	@$(CLI) demo --name $(DEMO_CLUSTER)

lint: venv ## ruff, mypy --strict, import-linter, generated-files check (the CRD, config/ and the chart)
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m mlops_platform.api.crd --check
	$(BIN)/python -m mlops_platform.deploy.manifests --check
	@helm=$$(hack/build-control-plane --print-helm); [ -x "$$helm" ] || hack/build-control-plane --helm-only; \
	  echo "helm lint --strict charts/mlops-platform"; "$$helm" lint --strict charts/mlops-platform; \
	  for set in webhook.certManager.enabled=false webhook.certManager.enabled=true activator.enabled=false; do \
	    echo "helm template charts/mlops-platform --include-crds --set $$set"; \
	    "$$helm" template mlops-platform charts/mlops-platform --include-crds --set "$$set" > /dev/null; done

unit: venv ## unit tests only (no cluster)
	$(BIN)/pytest -m unit

# Lint runs while the fresh test clusters start (they serve after ~50 s). The cluster tiers
# (integration, e2e, reliability) mostly wait on the control plane's controllers, so they run in
# TEST_SHARDS groups side by side, each on its own cluster (three: four saturate the 2 cores, load
# average 31, and were no faster), split by whole
# modules (mlops_platform.testing.modulesplit: a module's fixtures, a model store, an operator, a
# monitoring stack, run once, not once per group that got one of its tests) from the durations
# pytest-split measured in $(TEST_DURATIONS) (refresh: `make test-durations`), the costliest module
# first to the least loaded group, a module measured in an earlier make test at its time there
# ($(TEST_MODULE_TIMES), `make test-balance` after a make test). Group 1 prints as it runs; the others' output is kept in
# $(TEST_LOGS)/ and printed when they end. Beside the groups, one lane runs what needs no group's
# cluster: bench-smoke, $(OWN_CLUSTER_TESTS), then the unit tier (one process at nice 10: kept out
# of the pre-phase it no longer holds the groups' start back by ~110 s, and niced it takes the cores
# the groups leave idle while they wait, instead of slowing them: at nice 0 it stretched the groups
# by 60-80 s, 20 min 53 s in all; it still ends minutes before the groups).
TEST_LOGS := .test-logs
TEST_SHARDS ?= 3
TEST_DURATIONS := tests/cluster-durations.json
# each module's wall time in a make test (its groups write them; `make test-balance` keeps them)
TEST_MODULE_TIMES := tests/cluster-module-times.json
CLUSTER_TIERS := integration or e2e or reliability
# a test that starts a cluster of its own (docs/install.md's, word for word): run beside bench-smoke,
# after it, not in a group (it needs no group's cluster, and the groups are the critical path)
OWN_CLUSTER_TESTS := tests/e2e/test_docs_install.py
SHARD_IDS = $(shell seq 1 $(TEST_SHARDS))
test: venv binaries ## everything CI runs: lint while fresh local clusters start, then integration + e2e + reliability split over them, and bench-smoke and the unit tier beside them
	@mkdir -p $(TEST_LOGS)
	@echo "make test: [$$(date +%T)] taking down what an earlier run left"; \
	  for i in $(SHARD_IDS); do $(CLI) dev down --name $(TEST_CLUSTER)-$$i & done; wait  # fresh: no state left by an earlier run
	@echo "make test: [$$(date +%T)] starting clusters $(TEST_CLUSTER)-{$(SHARD_IDS)} (logs: $(TEST_LOGS)/) while lint runs"
	@ups=(); for i in $(SHARD_IDS); do \
	    $(CLI) dev up --name $(TEST_CLUSTER)-$$i > $(TEST_LOGS)/cluster-up-$$i.log 2>&1 & ups+=($$!); done; \
	  lint=0; $(MAKE) --no-print-directory lint || lint=$$?; \
	  crc=0; for i in $(SHARD_IDS); do wait $${ups[$$((i - 1))]} || crc=$$?; cat $(TEST_LOGS)/cluster-up-$$i.log; done; \
	  if [ $$lint -ne 0 ] || [ $$crc -ne 0 ]; then \
	    echo "make test: lint rc=$$lint, cluster start rc=$$crc"; \
	    for i in $(SHARD_IDS); do $(CLI) dev down --name $(TEST_CLUSTER)-$$i & done; wait; exit 1; fi
	@echo "make test: [$$(date +%T)] the cluster tiers in $(TEST_SHARDS) groups; bench-smoke, $(OWN_CLUSTER_TESTS) and the unit tier beside them"; \
	  shard() { MLOPS_TEST_CLUSTER=$(TEST_CLUSTER)-$$1 $(BIN)/pytest -v --durations=15 -m '$(CLUSTER_TIERS)' \
	    --ignore=$(OWN_CLUSTER_TESTS) \
	    --module-splits $(TEST_SHARDS) --module-group $$1 --module-durations $(TEST_DURATIONS) \
	    --module-times $(TEST_MODULE_TIMES) --module-times-out $(TEST_LOGS)/module-times-$$1.json; }; \
	  lane() { r=0; $(MAKE) --no-print-directory bench-smoke || r=1; $(BIN)/pytest -v -m e2e $(OWN_CLUSTER_TESTS) || r=1; \
	    echo "make test: [$$(date +%T)] the unit tier (nice 10)"; u=0; nice -n 10 $(BIN)/pytest -v --durations=10 -m unit || u=$$?; \
	    if [ $$u -eq 5 ]; then echo "pytest collected no unit tests: failing"; fi; [ $$u -eq 0 ] || r=1; return $$r; }; \
	  pids=(); for i in $(SHARD_IDS); do [ $$i -eq 1 ] || { shard $$i > $(TEST_LOGS)/cluster-tier-$$i.log 2>&1 & pids+=($$!); }; done; \
	  lane > $(TEST_LOGS)/lane.log 2>&1 & lane=$$!; \
	  rcs=(); r=0; shard 1 || r=$$?; rcs+=($$r); \
	  for i in $(SHARD_IDS); do [ $$i -eq 1 ] && continue; r=0; wait $${pids[$$((i - 2))]} || r=$$?; rcs+=($$r); \
	    echo "==== cluster tiers, group $$i of $(TEST_SHARDS) ($(TEST_LOGS)/cluster-tier-$$i.log) ===="; cat $(TEST_LOGS)/cluster-tier-$$i.log; done; \
	  echo "make test: [$$(date +%T)] the groups ended; taking their clusters down"; \
	  downs=(); for i in $(SHARD_IDS); do $(CLI) dev down --name $(TEST_CLUSTER)-$$i & downs+=($$!); done; \
	  for p in "$${downs[@]}"; do wait $$p || rcs+=(1); done; \
	  lrc=0; wait $$lane || lrc=$$?; echo "==== bench-smoke, $(OWN_CLUSTER_TESTS), the unit tier ($(TEST_LOGS)/lane.log) ===="; cat $(TEST_LOGS)/lane.log; \
	  rc=0; for r in "$${rcs[@]}"; do if [ $$r -eq 5 ]; then echo "a group collected no tests: failing"; fi; [ $$r -eq 0 ] || rc=1; done; \
	  echo "make test: [$$(date +%T)] cluster tier groups rc=$${rcs[*]}, bench-smoke, $(OWN_CLUSTER_TESTS) and the unit tier rc=$$lrc"; [ $$lrc -eq 0 ] || rc=1; exit $$rc

test-durations: venv binaries ## measure the cluster tiers' test durations on one fresh cluster, for make test's split
	@$(CLI) dev down --name $(TEST_CLUSTER)-durations
	@rc=0; MLOPS_TEST_CLUSTER=$(TEST_CLUSTER)-durations $(BIN)/pytest -q -m '$(CLUSTER_TIERS)' \
	    --store-durations --clean-durations --durations-path $(TEST_DURATIONS) || rc=$$?; \
	  $(CLI) dev down --name $(TEST_CLUSTER)-durations || rc=$${rc:-1}; exit $$rc

test-balance: venv ## keep the module wall times the last make test measured (the mean with the kept ones), for the next runs' split
	$(BIN)/python -m mlops_platform.testing.modulesplit $(TEST_MODULE_TIMES) $(TEST_MODULE_TIMES) $(TEST_LOGS)/module-times-*.json

RELIABILITY_CLUSTER ?= mlops-reliability
test-reliability: venv binaries ## the full reliability suite on its own fresh cluster; writes its table into docs/reliability.md
	@$(CLI) dev down --name $(RELIABILITY_CLUSTER)
	@$(CLI) dev up --name $(RELIABILITY_CLUSTER)
	@rc=0; MLOPS_TEST_CLUSTER=$(RELIABILITY_CLUSTER) MLOPS_RELIABILITY=full MLOPS_RELIABILITY_REPORT=docs/reliability.md \
	  $(BIN)/pytest -v --durations=0 -m reliability $(PYTEST_ARGS) || rc=$$?; \
	  $(CLI) dev down --name $(RELIABILITY_CLUSTER) || rc=$${rc:-1}; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; fi; exit $$rc

test-conversion: venv ## the full conversion property run: 3 x 3,400 generated objects, every version pair
	MLOPS_CONVERSION_EXAMPLES=3400 $(BIN)/pytest -q tests/unit/api/test_conversion.py

bench-smoke: venv binaries ## scale benchmark at N=50 on its own cluster: fails on any steady-state write or GET/LIST
	$(BIN)/python -m bench.scale --smoke --cluster-name mlops-bench-smoke

bench: venv binaries ## the scale benchmark (N = 100, 1000, 5000; about 85 min on 2 cores): docs/benchmarks/
	$(BIN)/python -m bench.scale $(BENCH_ARGS)

bench-node: venv binaries ## the real worker node's numbers: start, pod create -> Ready p50/p99, idle CPU/RSS, capacity: docs/benchmarks/realnode.md
	$(BIN)/python -m bench.realnode $(BENCH_ARGS)

bench-serving: venv binaries ## serving on the real node: cold start and request latency, operator vs hand-written YAML; the initializer's MiB/s: docs/benchmarks/serving.md
	$(BIN)/python -m bench.serving $(BENCH_ARGS)

bench-wake: venv binaries ## wake from zero through the activator: cold wake p50/p95 over 5 wakes and where the time goes, warm requests past it: docs/benchmarks/wake.md
	$(BIN)/python -m bench.wake $(BENCH_ARGS)

bench-analysis: venv binaries ## progressive delivery's cost: queries/s to Prometheus, operator CPU and RSS for N=100 canaries in analysis vs without (kwok pods, synthetic series): docs/benchmarks/analysis.md
	$(BIN)/python -m bench.analysis $(BENCH_ARGS)

bench-conversion: venv binaries ## conversion webhook latency vs the SLO (p99 <= 50 ms per object), N=1000: docs/benchmarks/
	$(BIN)/python -m bench.conversion $(BENCH_ARGS)

fmt: venv ## format the code
	$(BIN)/ruff format src tests examples
	$(BIN)/ruff check --fix src tests examples

clean: ## remove the venv and caches (the binary cache outside the repo is kept)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache $(TEST_LOGS)
