# Quick start on a fresh machine: `make demo` runs the main job, `make test` the tests.
# Both create .venv and install what they need.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU torch build that pip on these machines finds offline; the trainer
# tests and the image integration tests use it.
TEST_TORCH ?= 2.13.0
# The image tests and `make demo` build on a local Debian base (no registry is reachable on the CI machines)
# with the CPU torch wheel in a local wheelhouse; scripts/ prepare both and start a Docker engine if needed.
TEST_BASE ?= provision-local/debian-python:bookworm
WHEELHOUSE ?= .cache/wheelhouse
IMAGE_ENV := PROVISION_TEST_BASE=$(TEST_BASE) PROVISION_TEST_WHEELHOUSE=$(WHEELHOUSE) \
	PROVISION_DEMO_BASE=$(TEST_BASE) PROVISION_DEMO_WHEELHOUSE=$(WHEELHOUSE)

.PHONY: venv test test-all unit demo lint bench bench-launch golden clean engine

venv: $(VENV)/.installed

# DeepSpeed for the ZeRO-2/ZeRO-3 tests, in the range matrices/extras.yaml allows. It is an sdist whose
# setup.py imports torch (hence no build isolation); its CPU Adam op is compiled here, once, with the
# system C++ compiler, so no test waits for a JIT build.
DEEPSPEED_REQ = $(shell sed -n '/name: deepspeed/,/requirement:/s/.*requirement: "\(.*\)"/\1/p' matrices/extras.yaml)

$(VENV)/.installed: pyproject.toml setup.py matrices/extras.yaml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned, so the `train` extra does not pull a CUDA build.
	$(BIN)/pip install -q "torch==$(TEST_TORCH)"
	$(BIN)/pip install -q -e ".[train,plot,grpo,dev]"
	DS_BUILD_CPU_ADAM=1 DS_BUILD_OPS=0 TORCH_DEVICE_BACKEND_AUTOLOAD=0 \
		$(BIN)/pip install -q --no-cache-dir --no-build-isolation "$(DEEPSPEED_REQ)"
	touch $@

engine:
	scripts/engine.sh
	scripts/base-image.sh $(TEST_BASE)
	PYTHON=$(BIN)/python scripts/wheelhouse.sh $(WHEELHOUSE) $(TEST_TORCH)

# What CI runs (within 20 minutes on 2 cores): everything but the `full` tier, which holds repeated builds of a
# recipe make test builds once, every framework lock re-resolved online on both architectures, and the longer
# variants of runs make test does in a shorter form (tests marked `full`; pyproject.toml lists the markers).
test: venv engine
	$(IMAGE_ENV) $(BIN)/python -m pytest -q -m "not full" --durations=25

# Every test, the `full` tier included: before a release, and after a lock or a Dockerfile stage changes.
test-all: venv engine
	$(IMAGE_ENV) $(BIN)/python -m pytest -q --durations=25

# No engine, no root: real-engine and mknod tests are left to `make test`.
unit: venv
	$(BIN)/python -m pytest -q -m "not docker and not slow and not mknod"

# ruff on everything, mypy on the whole package (settings in pyproject.toml).
lint: venv
	$(BIN)/ruff check provisioner tests benchmarks
	$(BIN)/mypy

demo: venv engine
	$(IMAGE_ENV) $(BIN)/python -m provisioner.demo

bench: venv
	$(BIN)/python benchmarks/cli_start.py
	$(BIN)/python benchmarks/audit_speed.py

# Needs root (mknod) and a running Docker engine.
bench-launch: venv
	$(BIN)/python benchmarks/launch_overhead.py

clean:
	rm -rf $(VENV) build dist *.egg-info
