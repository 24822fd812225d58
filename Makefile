# One entry point for people and CI. `make dev` runs the product locally; `make test` runs
# every test (building the Kubernetes binaries on first use).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export GOTOOLCHAIN := local
export GOWORK := off

.PHONY: venv testbin dev test unit lint dist bench bench-scale bench-steady profile devstack-bench clean-testbin

# The product and, beside it, the local stack it is developed and tested on (tools/devstack, a
# distribution of its own that the product never imports).
$(VENV)/.installed: pyproject.toml tools/devstack/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]' -e ./tools/devstack
	touch $@

venv: $(VENV)/.installed

# every binary make dev and make test need (the upstream Trainer and JobSet controllers and
# promtool too)
testbin:
	TESTBIN_EXTRA="trainer jobset promtool" bash hack/ensure-testbin.sh

dev: venv
	$(PY) -m devstack dev

lint: venv
	$(VENV)/bin/ruff check functions tests bench tools/devstack
	$(VENV)/bin/mypy

# The tests that need no cluster, no Go-built binary and no upstream manifests: they pass on a
# machine without Go, an empty cache and no network beyond the venv's packages.
unit: venv
	$(VENV)/bin/pytest -m "not cluster and not binaries and not upstream" -q $(PYTEST_ARGS)

test: venv lint
	@dir=$$(TESTBIN_EXTRA="trainer jobset promtool" bash hack/ensure-testbin.sh) && export TESTBIN_DIR=$$dir && \
	$(VENV)/bin/pytest -q $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

# The release artifacts of this version in dist/: the product wheel, the CRDs, the rendered
# installs (Kubernetes, OpenShift, OpenShift AI) and SHA256SUMS (hack/dist.sh).
dist: venv
	PYTHON=$(PY) bash hack/dist.sh

# The burst suite compares with the upstream Go operator: build it too (once, cached).
bench: venv
	@dir=$$(TESTBIN_EXTRA=training-operator bash hack/ensure-testbin.sh) && export TESTBIN_DIR=$$dir && \
	$(PY) -m bench $(BENCH_ARGS)

# new replicas, memory and whole passes into clusters of 1,000 and 5,000 jobs, ours and Go
# (bench/scale.py; SCALE_ARGS="--sizes 1000" for one size)
bench-scale: venv
	@dir=$$(TESTBIN_EXTRA=training-operator bash hack/ensure-testbin.sh) && export TESTBIN_DIR=$$dir && \
	$(PY) -m bench.scale $(SCALE_ARGS)

# jobs created at a steady rate (2 and 8 per second, 5 minutes each), ours on the emulated and
# the real Knative data plane beside the Go operator (bench/steady.py; STEADY_ARGS="--rates 2")
bench-steady: venv
	@dir=$$(TESTBIN_EXTRA=training-operator bash hack/ensure-testbin.sh) && export TESTBIN_DIR=$$dir && \
	$(PY) -m bench.steady $(STEADY_ARGS)

# where the functions' Python time goes under the burst (py-spy), on the emulated and the real
# Knative data plane, what their deliveries wait for (wall clock), and the API server's and the
# adapter's time (go tool pprof, beside the tuned Go operator's run): bench/results/profile.md
profile: venv
	@dir=$$(TESTBIN_EXTRA=training-operator bash hack/ensure-testbin.sh) && export TESTBIN_DIR=$$dir && \
	$(PY) -m bench.profile $(PROFILE_ARGS)

# the dev stack's start-up and the recorded build times: bench/results/devstack.md
devstack-bench: venv
	$(PY) -m bench.devstack

clean-testbin:
	rm -rf $${XDG_CACHE_HOME:-$$HOME/.cache}/odh-training-functions/build $${XDG_CACHE_HOME:-$$HOME/.cache}/odh-training-functions/bin
