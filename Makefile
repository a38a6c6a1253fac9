# Quick start on a fresh machine: `make demo` runs the main job, `make test` the tests.
# Both create .venv and install what they need.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU torch build that pip on these machines finds offline; the trainer
# tests and the image integration tests use it.
TEST_TORCH ?= 2.13.0

.PHONY: venv test unit demo lint bench bench-launch golden clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned, so the `train` extra does not pull a CUDA build.
	$(BIN)/pip install -q "torch==$(TEST_TORCH)"
	$(BIN)/pip install -q -e ".[train,dev]"
	touch $@

test: venv
	$(BIN)/python -m pytest -q

unit: venv
	$(BIN)/python -m pytest -q -m "not docker and not slow"

lint: venv
	$(BIN)/ruff check provisioner tests benchmarks

demo: venv
	$(BIN)/python -m provisioner.demo

bench: venv
	$(BIN)/python benchmarks/cli_start.py
	$(BIN)/python benchmarks/audit_speed.py

# Needs root (mknod) and a running Docker engine.
bench-launch: venv
	$(BIN)/python benchmarks/launch_overhead.py

clean:
	rm -rf $(VENV) build dist *.egg-info
