# gpusched: the two commands a new machine needs are `make demo` and `make test`;
# each creates .venv and builds the Go binaries (cached by version) on first use.
# `make simulate` is the offline simulator's comparison.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
GPUSCHED_CACHE ?= $(HOME)/.cache/gpusched
export GPUSCHED_CACHE
STAMP := $(VENV)/.installed

.PHONY: all venv bins prometheus browser demo demo-cluster simulate test test-unit test-integration soak-faults lint bench bench-churn bench-cluster packing-bound cluster-up cluster-down clean

all: test

# Not quiet: on a fresh machine the install takes minutes, and pip's "Collecting ..." lines
# show it progressing.
$(STAMP): pyproject.toml
	@echo "make: creating $(VENV) with the Python dependencies (minutes on a fresh machine)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install --progress-bar off -e '.[dev,plot]'
	@touch $(STAMP)

venv: $(STAMP)

bins:
	@tools/build.sh

# The telemetry tests' Prometheus: Debian's package, fetched (apt-get download, else a Debian
# mirror from the apt sources), checked against its pinned SHA-256 and unpacked into the
# binary cache; no root (gpusched/devcluster/prometheus.py).
prometheus: venv
	@$(PY) -m gpusched.devcluster prometheus

# The GPU map's browser test (tests/integration/test_gpu_map_browser.py): Debian's Chromium,
# run headless. Installed here when missing (CI runs as root on Debian 12); anyone else is
# told the command. The test fails, never skips, without it.
CHROMIUM ?= /usr/bin/chromium
browser:
	@if [ -x $(CHROMIUM) ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "make browser: $(CHROMIUM) is missing; the GPU map's browser test needs Debian's" \
			"chromium. As root: apt-get install -y --no-install-recommends chromium" >&2; \
		exit 1; \
	fi; \
	echo "make browser: installing Debian's chromium (the GPU map's browser test)"; \
	apt-get install -y --no-install-recommends chromium \
		|| { apt-get update && apt-get install -y --no-install-recommends chromium; } \
		|| { echo "make browser: apt-get could not install chromium" >&2; exit 1; }; \
	test -x $(CHROMIUM) || { echo "make browser: $(CHROMIUM) still missing" >&2; exit 1; }

# A local control plane to point kubectl at (tools/README.md): `make cluster-up` starts etcd,
# kube-apiserver, KWOK and kube-scheduler on loopback, loads NODES generated GPU nodes
# (default 64) or the rows of NODE_LIST (an openb node CSV; NODES then caps the count), and
# writes .cluster/kubeconfig and .cluster/bin/ (kubectl & co). `make cluster-down` stops it.
NODES ?=
NODE_LIST ?=
.PHONY: cluster-status

cluster-up: venv bins
	$(PY) -m gpusched.devcluster up $(if $(NODES),--nodes $(NODES)) \
		$(if $(NODE_LIST),--node-list '$(NODE_LIST)')

cluster-down: venv
	$(PY) -m gpusched.devcluster.demo stop
	$(PY) -m gpusched.devcluster down

# The product on the local control plane (README "Quick start", docs/daemon.md): starts
# (or reuses) `make cluster-up` with the demo's 8 nodes x 8 GPUs, runs `gpusched run` in
# the background (log: out/demo/gpusched.log, kept by `make cluster-down`), applies a mixed
# workload (gpusched/devcluster/demo_workload.py) in four waves and prints pod -> node ->
# cards -> why; then the same workload on an identical fresh cluster under kube-scheduler's
# default profile (stopped at the end), side by side with a verdict and a legend.
# gpusched's cluster and daemon keep running for kubectl until `make cluster-down`.
# BASELINE=gpu-packing compares with kube-scheduler tuned to pack GPUs instead.
BASELINE ?= default
demo: venv bins
	$(PY) -m gpusched.devcluster.demo --baseline $(BASELINE) up

# The former name of `make demo`.
demo-cluster: demo

cluster-status: venv
	@$(PY) -m gpusched.devcluster status

# The offline simulator (no cluster, about 15 s): ai-scheduler against kube-scheduler-like
# scoring on a generated fleet with modelled heat (README "The simulator").
simulate: venv
	$(VENV)/bin/gpusched simulate

test: venv bins prometheus browser
	$(PY) -m pytest tests

test-unit: venv
	$(PY) -m pytest tests/unit

test-integration: venv bins prometheus browser
	$(PY) -m pytest tests/integration

# The fault suite, longer (README "Safety"): the kill -9 and Lease-edit scenarios
# (test_faults_kill.py, test_faults_leader.py) with SOAK_BURSTS bursts of SOAK_PODS pods
# each instead of CI's 2 x 24 and 1 x 48, and the API faults (test_faults_api.py) with
# 300-pod bursts and a real 46 s watch silence; a summary line per scenario at the end.
# Not part of `make test`.
SOAK_BURSTS ?= 6
SOAK_PODS ?= 60
soak-faults: venv bins
	GPUSCHED_SOAK=1 GPUSCHED_SOAK_BURSTS=$(SOAK_BURSTS) GPUSCHED_SOAK_PODS=$(SOAK_PODS) \
		$(PY) -m pytest tests/integration/test_faults_kill.py \
		tests/integration/test_faults_leader.py tests/integration/test_faults_api.py \
		-p tests.integration.soak_summary \
		-o timeout=3600 -q

lint: venv
	$(VENV)/bin/ruff check gpusched tests bench
	$(VENV)/bin/ruff format --check gpusched tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# What a pod costs the code that runs (docs/performance-cycle.md): ScheduleOne with the
# default profile at 1,000 / 5,000 / 10,000 nodes x 8 cards, per extension point and plugin,
# against a NodeResourcesFit + GPUFit profile in the same run (about 4 minutes; reads the
# openb trace through TRACE_DIR); the binding path (the Binding write, the post-bind
# bookkeeping); the watch decode.
bench: venv
	$(PY) bench/schedule_one.py --trace-dir $(TRACE_DIR)
	$(PY) bench/bind_path.py
	$(PY) bench/watch_decode.py

# End-to-end throughput and create->bind latency, kube-scheduler v1.36.3 against
# `gpusched run`, each on its own fresh local cluster of BENCH_NODES KWOK nodes x 8 GPUs:
# backlogs of single-GPU and mixed pods, and pods created at 200/s (bench/throughput.py,
# docs/performance-cluster.md). BENCH_ARGS passes more flags (--quick, --profile,
# --base-tree DIR, --scenarios ...).
BENCH_NODES ?= 1000
BENCH_ARGS ?=
bench-cluster: venv bins
	$(PY) bench/throughput.py --nodes $(BENCH_NODES) $(BENCH_ARGS)

# RSS and per-pod cost with 20,000 unschedulable pods pending and 10,000 node label updates
# through the scheduler's own loop (bench/churn.py; about 2 minutes).
bench-churn: venv
	$(PY) bench/churn.py

# How low unallocated GPU can go in the FGD protocol (docs/fgd-results.md); reads the trace
# through TRACE_DIR, never copies it. BOUND_PODS: other pod lists (e.g. generated variants,
# absolute paths or relative to TRACE_DIR); BOUND_NODES: another node list; BOUND_SEEDS.
TRACE_DIR ?= ../shared/traces/openb
BOUND_PODS ?= $(foreach t,default gpushare40 multigpu20 gpuspec10 cpu050,openb_pod_list_$(t).csv)
BOUND_NODES ?= openb_node_list_gpu_node.csv
BOUND_SEEDS ?= 42-51
packing-bound: venv
	$(PY) -m gpusched.sim.packing_bound --trace-dir $(TRACE_DIR) --seeds $(BOUND_SEEDS) \
		--nodes $(BOUND_NODES) $(foreach p,$(BOUND_PODS),--pods $(p))

# The FGD protocol's arrival sequence through the live daemon (`gpusched run`) on the local
# control plane, its unallocated GPU % beside the simulator's for the same seed, with the
# per-pod placement agreement (docs/fgd-results.md, "Live parity"). LIMIT=N: the first N
# arrivals only (a full seed is 10,866 pods). Reads the trace through TRACE_DIR.
SEED ?= 42
LIMIT ?=
# FGD and ai-scheduler on every dev trace and workload variant, with the bound that sees
# models and CPU and the share of FGD's gap closed (gpusched/sim/variant_table.py; the
# README's table). SEEDS=47-51 are the report seeds (42-46 tuned the defaults); about
# 15 s per run, 3 runs per case and seed on JOBS processes. OUT keeps results to resume.
SEEDS ?= 42-51
JOBS ?= 2
OUT ?= out/variant-table.json
.PHONY: variants-table
variants-table: venv
	@mkdir -p $(dir $(OUT))
	$(PY) -m gpusched.sim.variant_table --trace-dir $(TRACE_DIR) --seeds $(SEEDS) --jobs $(JOBS) --out $(OUT)

.PHONY: bench-fgd-cluster
bench-fgd-cluster: venv bins
	$(PY) bench/fgd_cluster.py --trace-dir $(TRACE_DIR) --seed $(SEED) $(if $(LIMIT),--limit $(LIMIT))

clean:
	rm -rf $(VENV) .cluster build *.egg-info
