# The front door of the benchmark stack. `make help` lists the targets. Every variable
# written `?=` can be overridden: `make bench-single MODEL=resnet152 BATCH_SIZES="64 128"`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Base images, pinned by digest: docker/images.env is their one source.
include docker/images.env

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The node's settings: compose/.env when present, else the documented defaults.
NODE_ENV ?= $(if $(wildcard compose/.env),compose/.env,compose/.env.example)
# The trainer services read the same file as their env_file (Compose resolves it for every
# service, even in profiles not started).
export BENCH_ENV_FILE := $(abspath $(NODE_ENV))
env_value = $(shell sed -n 's/^$(1)=//p' $(NODE_ENV) | tail -n 1)
IMAGE ?= $(call env_value,IMAGE)
CPU_IMAGE ?= $(call env_value,CPU_IMAGE)
NFS_IMAGE ?= $(call env_value,NFS_IMAGE)
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
export COMPOSE
TORCH_FLAVOUR ?= default
PROFILE ?= gpu
RUN_TAG := $(shell date -u +%Y%m%dT%H%M%SZ)
EXPORT_DIR ?= nfs/export
DATASET ?= fashion-mnist
FASHION_MNIST_DIR ?= /usr/share/datasets/fashion-mnist

# The benchmark matrix. GPU targets and the CPU profile differ in defaults only; a value
# given on the command line (make bench-cpu MODEL=smallcnn) applies to either.
bench-single bench-multigpu: MODEL ?= resnet50
bench-single bench-multigpu: BATCH_SIZES ?= 64 128 256
bench-single bench-multigpu: STEPS ?= 50
bench-cpu: MODEL ?= resnet18
bench-cpu: BATCH_SIZES ?= 32 64
bench-cpu: STEPS ?= 10
PRECISION ?= fp32
EPOCHS ?= 1
REPEATS ?= 3
CPU_IMAGE_SIZE ?= 32
CPU_TRAIN_SAMPLES ?= 4096
CPU_EVAL_SAMPLES ?= 2000

.PHONY: help venv host docker wheels wheels-cpu build build-cpu build-nfs base-image \
        bench-single bench-multigpu bench-cpu bench-comm bench-emulated bench-predict bench-overhead bench-container-overhead bench-launch-overhead bench-matrix bench-multinode doctor table plot node-up nfs-up nfs-down \
        dataset settings test unit lint clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | \
	  awk 'BEGIN {FS = ":.*## "}; {printf "  %-16s %s\n", $$1, $$2}'

# --- host set-up ---------------------------------------------------------------------------
$(VENV)/.installed: requirements.txt requirements-host.txt pyproject.toml
	@echo "venv: installing the pinned requirements into $(VENV) (torch is large: a few minutes the first time)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-host.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

venv: $(VENV)/.installed ## create the host venv from the pinned requirements

host: ## install missing host packages (Docker engine, Compose, dataset, debootstrap, GPU toolkit)
	scripts/install-host.sh

docker: ## install Docker and Compose if missing, start the daemon if it is not running
	@scripts/ensure-docker.sh

$(FASHION_MNIST_DIR):
	@echo "Fashion-MNIST not found in $(FASHION_MNIST_DIR): installing Debian's dataset-fashion-mnist"
	scripts/install-host.sh dataset

# --- images --------------------------------------------------------------------------------
wheels: ## download the GPU image's wheels on the host (TORCH_FLAVOUR=default|cu126|cu128...)
	scripts/download-wheels.sh .wheels/py$(CUDA_BASE_PYTHON)-$(TORCH_FLAVOUR) $(CUDA_BASE_PYTHON) $(TORCH_FLAVOUR)

wheels-cpu: ## download the CPU image's wheels on the host
	scripts/download-wheels.sh .wheels/py$(CPU_BASE_PYTHON)-default $(CPU_BASE_PYTHON) default

base-image: docker ## build the local Debian base image (for sites without a registry)
	scripts/make-base-image.sh $(LOCAL_BASE_IMAGE)

build: docker ## build the GPU trainer image (IMAGE, TORCH_FLAVOUR)
	scripts/build-image.sh trainer $(IMAGE) "$(CUDA_BASE_IMAGE)" $(CUDA_BASE_PYTHON) $(TORCH_FLAVOUR)

build-cpu: docker ## build the CPU trainer image (CPU_IMAGE) from the same Dockerfile
	scripts/build-image.sh trainer $(CPU_IMAGE) "$(CPU_BASE_IMAGE)" $(CPU_BASE_PYTHON) default

build-nfs: docker ## build the NFS server image (NFS_IMAGE)
	scripts/build-image.sh nfs $(NFS_IMAGE) "$(NFS_BASE_IMAGE)"

# --- data and the NFS server ---------------------------------------------------------------
dataset: venv ## stage DATASET=fashion-mnist|cifar10|imagefolder [SRC=dir] into the export, with a manifest
	@if [ "$(DATASET)" = fashion-mnist ] && [ -z "$(SRC)" ]; then $(MAKE) --no-print-directory $(FASHION_MNIST_DIR); fi
	$(PY) -m bench dataset stage $(DATASET) --export $(EXPORT_DIR) $(if $(SRC),--src $(SRC))

nfs-up: venv docker ## serve the export over NFSv4 (profile nfs), wait until healthy
	$(PY) -m bench settings --env-file $(NODE_ENV) --profile nfs
	$(COMPOSE) -p bench-nfs -f compose/docker-compose.yml --env-file $(NODE_ENV) --profile nfs up -d nfs
	@for i in $$(seq 30); do \
	  status=$$(docker inspect -f '{{.State.Health.Status}}' $$($(COMPOSE) -p bench-nfs -f compose/docker-compose.yml --env-file $(NODE_ENV) --profile nfs ps -q nfs) 2>/dev/null); \
	  if [ "$$status" = healthy ]; then echo "nfs: serving $(EXPORT_DIR) on TCP 2049"; exit 0; fi; sleep 2; \
	done; echo "nfs: not healthy after 60 s; logs:"; \
	$(COMPOSE) -p bench-nfs -f compose/docker-compose.yml --env-file $(NODE_ENV) --profile nfs logs --tail 20 nfs; \
	$(MAKE) --no-print-directory nfs-down; exit 1

nfs-down: ## stop the NFS server
	$(COMPOSE) -p bench-nfs -f compose/docker-compose.yml --env-file $(NODE_ENV) --profile nfs down -t 5

# --- benchmarks ----------------------------------------------------------------------------
settings: venv ## check this node's settings (NODE_ENV, PROFILE) without starting anything
	$(PY) -m bench settings --env-file $(NODE_ENV) --profile $(PROFILE)

node-up: venv ## join the job described by NODE_ENV on this node (PROFILE=gpu|cpu; NODE_RANK=i)
	$(PY) -m bench compose --profile $(PROFILE) --env-file $(NODE_ENV) --only-this-node \
	  --image $(if $(filter cpu,$(PROFILE)),$(CPU_IMAGE),$(IMAGE)) -- $(call env_value,BENCH_ARGS)

# One job per batch size through Compose; a failed job is recorded and the matrix goes on,
# and the shell variable `failed` remembers it for the exit status.
# $(1) profile, $(2) nodes, $(3) processes per node, $(4) image, $(5) env file, $(6) flags
define compose_matrix
for bs in $(BATCH_SIZES); do \
  echo "== $(1): $(2) node(s) x $(3) process(es), batch $$bs per device"; \
  $(PY) -m bench compose --profile $(1) --env-file $(5) --nnodes $(2) --nproc-per-node $(3) \
    --image $(4) --results $(RESULTS) -- --batch-size $$bs $(6) || failed=1; \
done
endef
show_results = $(PY) -m bench table $(RESULTS); echo "results: $(RESULTS)"
GPU_WORKLOAD = --steps $(STEPS) --model $(MODEL) --precision $(PRECISION)

bench-single: RESULTS ?= results/single-$(RUN_TAG).jsonl
bench-single: ## one GPU of this node: MODEL, BATCH_SIZES, STEPS, PRECISION
	@scripts/check-gpu.sh >/dev/null
	@$(MAKE) --no-print-directory build venv
	@failed=0; $(call compose_matrix,gpu,1,1,$(IMAGE),$(NODE_ENV),$(GPU_WORKLOAD)); \
	$(show_results); exit $$failed

bench-multigpu: RESULTS ?= results/multigpu-$(RUN_TAG).jsonl
bench-multigpu: ## all GPUs of this node: MODEL, BATCH_SIZES, STEPS, PRECISION
	@scripts/check-gpu.sh >/dev/null
	@$(MAKE) --no-print-directory build venv
	@failed=0; gpus=$$(scripts/check-gpu.sh); \
	$(call compose_matrix,gpu,1,$$gpus,$(IMAGE),$(NODE_ENV),$(GPU_WORKLOAD)); \
	$(show_results); exit $$failed

# CI's main job: 2 trainer containers as node ranks 0 and 1 on loopback, the dataset bind-
# mounted (CI's kernel has no NFS client), synthetic data, then real Fashion-MNIST. Both
# "nodes" share this host's 2 cores (one thread each) and talk over lo only.
CPU_ENV_FILE := build/cpu-$(RUN_TAG).env
CPU_WORKLOADS = "--steps $(STEPS) --model $(MODEL) --image-size $(CPU_IMAGE_SIZE)" \
  "--epochs $(EPOCHS) --data fashion-mnist --data-dir /data/fashion-mnist --model $(MODEL) \
   --image-size $(CPU_IMAGE_SIZE) --max-train-samples $(CPU_TRAIN_SAMPLES) \
   --max-eval-samples $(CPU_EVAL_SAMPLES) --workers 1"
bench-cpu: RESULTS ?= results/cpu-$(RUN_TAG).jsonl
bench-cpu: venv build-cpu ## the CPU profile: 2 containers as 2 nodes, synthetic + Fashion-MNIST
	@$(MAKE) --no-print-directory dataset DATASET=fashion-mnist
	@mkdir -p build && sed -e 's#^DATA_MOUNT_TYPE=.*#DATA_MOUNT_TYPE=none#' \
	  -e 's#^DATA_MOUNT_OPTIONS=.*#DATA_MOUNT_OPTIONS=bind#' \
	  -e 's#^DATA_DEVICE=.*#DATA_DEVICE=$(abspath $(EXPORT_DIR))#' $(NODE_ENV) > $(CPU_ENV_FILE) \
	  && printf 'OMP_NUM_THREADS=1\nGLOO_SOCKET_IFNAME=lo\n' >> $(CPU_ENV_FILE)
	@failed=0; for workload in $(CPU_WORKLOADS); do \
	  $(call compose_matrix,cpu,2,1,$(CPU_IMAGE),$(CPU_ENV_FILE),$$workload); \
	done; rm -f $(CPU_ENV_FILE); $(show_results); exit $$failed

# The batch-size x topology matrix (python -m bench matrix): natively or through Compose on
# this host (bench-matrix), or one node per host over SSH (bench-multinode). Each ends with
# the tables, the plots and the results path; the exit status says whether a cell failed.
# $(1): launcher flags
define matrix_run
@failed=0; $(PY) -m bench matrix --batch-sizes "$(BATCH_SIZES)" --topologies "$(TOPOLOGIES)" \
  --models $(MODEL) --precisions $(PRECISION) --repeats $(REPEATS) --results $(RESULTS) $(1) \
  -- --steps $(STEPS) $(MATRIX_ARGS) || failed=1; \
$(PY) -m bench plot $(RESULTS) >/dev/null 2>&1 || true; $(show_results); exit $$failed
endef
LAUNCHER ?= native
RUNTIME ?= compose
HOSTS ?=
host_count = $(words $(subst $(comma), ,$(HOSTS)))
comma := ,

bench-matrix: BATCH_SIZES ?= 32 64
bench-matrix: MODEL ?= resnet18
bench-matrix: STEPS ?= 10
bench-matrix: TOPOLOGIES ?= 1x1,1x2,2x1
bench-matrix: RESULTS ?= results/matrix-$(RUN_TAG).jsonl
bench-matrix: venv ## BATCH_SIZES x TOPOLOGIES on this host (LAUNCHER=native|compose, REPEATS, MODEL)
	$(call matrix_run,--launcher $(LAUNCHER) $(if $(filter compose,$(LAUNCHER)),--image $(CPU_IMAGE) --env-file $(NODE_ENV) --profile cpu))

bench-multinode: BATCH_SIZES ?= 64 128 256
bench-multinode: MODEL ?= resnet50
bench-multinode: STEPS ?= 50
bench-multinode: TOPOLOGIES ?= 1x1,$(host_count)x1
bench-multinode: RESULTS ?= results/multinode-$(RUN_TAG).jsonl
bench-multinode: venv ## the matrix across HOSTS=h1,h2[,...] over SSH, one node per host (RUNTIME=compose|native)
	@[ -n "$(HOSTS)" ] || { echo "bench-multinode: set HOSTS=host1,host2[,...] (the first leads)" >&2; exit 2; }
	$(call matrix_run,--launcher ssh --hosts $(HOSTS) --runtime $(RUNTIME) --image $(IMAGE) --env-file $(abspath $(NODE_ENV)) --profile gpu)

doctor: venv ## preflight of HOSTS=h1,h2: ssh, docker, image, GPU, interface, ports, shm, data, clocks
	@[ -n "$(HOSTS)" ] || { echo "doctor: set HOSTS=host1,host2[,...] (the first leads)" >&2; exit 2; }
	$(PY) -m bench doctor --hosts $(HOSTS) --image $(if $(filter cpu,$(PROFILE)),$(CPU_IMAGE),$(IMAGE)) --env-file $(NODE_ENV)

table: venv ## tables of RESULTS (FORMAT=markdown|github|csv|latex)
	$(PY) -m bench table $(or $(RESULTS),$(NEWEST_RESULTS)) --format $(or $(FORMAT),markdown)

plot: venv ## PNG charts beside RESULTS (default: the newest results file)
	$(PY) -m bench plot $(or $(RESULTS),$(NEWEST_RESULTS))

bench-comm: COMM_TOPOLOGIES ?= 1x2
bench-comm: RESULTS ?= results/comm-$(RUN_TAG).jsonl
bench-comm: venv ## all-reduce busbw sweep on this host (COMM_TOPOLOGIES, MAX_SIZE), table + plot
	$(PY) -m bench matrix --workload allreduce --topologies $(COMM_TOPOLOGIES) --results $(RESULTS) \
	  -- $(if $(MAX_SIZE),--max-size $(MAX_SIZE))
	$(PY) -m bench plot $(RESULTS)

# The lab's 1 GbE finding in miniature, on emulated hosts (root): the link's all-reduce
# sweep, then 1 node vs 2 nodes with and without compression, then the prediction beside it.
bench-emulated: LINK ?= 1gbit
bench-emulated: MODEL ?= resnet18
bench-emulated: BATCH_SIZES ?= 16
bench-emulated: COMM_HOOKS ?= none,powersgd
bench-emulated: STEPS ?= 20
bench-emulated: REPEATS ?= 2
bench-emulated: RESULTS ?= results/emulated-$(LINK)-$(RUN_TAG).jsonl
bench-emulated: venv ## 1 vs 2 namespace nodes behind a shaped LINK (1gbit, 5gbit...): sweep, matrix, prediction
	$(PY) -m bench matrix --workload allreduce --launcher netns --link $(LINK) --topologies 2x1 \
	  --results $(RESULTS:.jsonl=-comm.jsonl) -- --max-size 64MiB --iters 10 --warmup-iters 2
	$(PY) -m bench matrix --launcher netns --link $(LINK) --topologies 1x1,2x1 --models $(MODEL) \
	  --batch-sizes "$(BATCH_SIZES)" --comm-hooks $(COMM_HOOKS) \
	  --repeats $(REPEATS) --results $(RESULTS) -- --steps $(STEPS) --warmup-steps 10 \
	  --powersgd-warmup 5 --image-size 32 --log-every 0
	$(PY) -m bench table $(RESULTS) --group-by model,batch,comm_hook
	$(PY) -m bench predict $(RESULTS) --link-from $(RESULTS:.jsonl=-comm.jsonl) --nodes 2,4
	$(PY) -m bench plot $(RESULTS:.jsonl=-comm.jsonl)

bench-predict: LINK ?= 5gbit
bench-predict: NODES ?= 2,4
bench-predict: venv ## predict N nodes from the 1-node runs in RESULTS over LINK (5gbit; LINK_FROM=sweep measured on your link)
	$(PY) -m bench predict $(or $(RESULTS),$(NEWEST_RESULTS)) --link $(LINK) \
	  $(if $(LINK_FROM),--link-from $(LINK_FROM)) --nodes $(NODES)

bench-overhead: venv ## trainer vs a plain DDP loop on CPU (goal: ratio >= 0.98)
	$(PY) scripts/overhead.py --against plain --repeats $(REPEATS)

bench-launch-overhead: venv build-cpu ## per-cell launch overhead, natively and through Compose (goal < 10 s)
	$(PY) scripts/launch_overhead.py --repeats $(REPEATS) --image $(CPU_IMAGE)

bench-container-overhead: venv build-cpu ## the trainer natively vs in the CPU container (goal >= 0.98)
	$(PY) scripts/overhead.py --against container --image $(CPU_IMAGE) --repeats $(REPEATS)

# --- quality -------------------------------------------------------------------------------
lint: venv ## static checks (ruff)
	$(VENV)/bin/ruff check bench tests scripts

unit: venv ## the fast unit tests only (no Docker)
	$(PY) -m pytest -m "not e2e"

test: venv lint docker build-cpu build-nfs | $(FASHION_MNIST_DIR) ## every test: unit and end-to-end (Docker, NFS, torchrun)
	BENCH_FASHION_MNIST_DIR=$(FASHION_MNIST_DIR) $(PY) -m pytest

clean: ## remove the venv, build files and caches (results and images are kept)
	rm -rf $(VENV) .pytest_cache build *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
