# The front door of the benchmark stack. `make help` lists the targets; every variable
# written `?=` can be overridden: `make bench-overhead STEPS=40`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RESULTS ?= results/runs.jsonl
FASHION_MNIST_DIR ?= /usr/share/datasets/fashion-mnist
STEPS ?= 20
REPEATS ?= 3

.PHONY: help venv host test unit lint bench-overhead clean

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | \
	  awk 'BEGIN {FS = ":.*## "}; {printf "  %-16s %s\n", $$1, $$2}'

$(VENV)/.installed: requirements.txt requirements-test.txt pyproject.toml
	@echo "venv: installing the pinned requirements into $(VENV) (torch is large: a few minutes the first time)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-test.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

venv: $(VENV)/.installed ## create the host venv from the pinned requirements

host: ## install missing host packages (Docker engine, Compose, dataset, debootstrap)
	scripts/install-host.sh

$(FASHION_MNIST_DIR):
	@echo "Fashion-MNIST not found in $(FASHION_MNIST_DIR): installing Debian's dataset-fashion-mnist"
	scripts/install-host.sh dataset

lint: venv ## static checks (ruff)
	$(VENV)/bin/ruff check bench tests scripts

unit: venv ## the fast unit tests only
	$(PY) -m pytest -m "not e2e"

test: venv lint | $(FASHION_MNIST_DIR) ## every test: unit and end-to-end
	BENCH_FASHION_MNIST_DIR=$(FASHION_MNIST_DIR) $(PY) -m pytest

bench-overhead: venv ## trainer vs a plain DDP loop on CPU (goal: ratio >= 0.98)
	$(PY) scripts/overhead.py --steps $(STEPS) --repeats $(REPEATS)

clean: ## remove the venv and caches (results are kept)
	rm -rf $(VENV) .pytest_cache build *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
