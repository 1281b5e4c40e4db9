# The front door of the benchmark stack. `make help` lists the targets. Every variable
# written `?=` can be overridden: `make bench-single MODEL=resnet152 BATCH_SIZES="64 128"`.
#
# No value a user gives make becomes shell syntax. Each user variable V below reaches the
# recipes only through the environment, as MK_V (exported, expanded per target so that the
# target defaults apply), and recipes read it as a quoted shell variable, "$$MK_V": the
# recipe text never holds a value, so `HOSTS='a;id'` is one argument, the host name `a;id`,
# which bench refuses in one line (exit 2). List values (BATCH_SIZES="32 64", TOPOLOGIES,
# NODES) go whole to bench, which splits them at commas or spaces; MATRIX_ARGS (extra
# trainer flags) is split at blanks, without quotes or globbing, one argument per word.
# A value given on the command line or in the environment may not contain '$': make would
# expand it ($(shell ...) runs a command) before any of this applies. NODE_ENV, a path
# that make reads itself and that reaches other hosts, must be a plain one (see below).
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Base images, pinned by digest: docker/images.env is their one source.
include docker/images.env

# The settings a user may give (on the command line or in the environment). `override`: a
# USER_VARIABLES on the command line must not widen the list the checks below read.
override USER_VARIABLES := PYTHON VENV NODE_ENV IMAGE CPU_IMAGE NFS_IMAGE TORCH_FLAVOUR PROFILE \
  EXPORT_DIR DATASET SRC FASHION_MNIST_DIR MODEL BATCH_SIZES STEPS PRECISION EPOCHS REPEATS \
  CPU_IMAGE_SIZE CPU_TRAIN_SAMPLES CPU_EVAL_SAMPLES RESULTS LAUNCHER RUNTIME HOSTS TOPOLOGIES \
  COMM_TOPOLOGIES MAX_SIZE LINK COMM_HOOKS NODES LINK_FROM FORMAT MATRIX_ARGS MODE \
  CUDA_BASE_IMAGE CUDA_BASE_PYTHON CPU_BASE_IMAGE CPU_BASE_PYTHON NFS_BASE_IMAGE \
  LOCAL_BASE_IMAGE LOCAL_BASE_PYTHON PARTITION ACCOUNT TIME_LIMIT NODES_PER_JOB GPUS_PER_NODE \
  SLURM_RUNTIME MLP_WIDTH MLP_DEPTH MEMORY_CAP K8S_DIR K8S_NAMESPACE RESULTS_CLAIM SHM_SIZE \
  LINKS N_CLEAN N_SLOW GRID WORKLOADS MIN_TIMED_S STEADY_S
# What may enter from outside: the settings, and COMPOSE (a command, split at blanks, not
# exported as MK_COMPOSE).
override ENTERING := $(USER_VARIABLES) COMPOSE
$(foreach v,$(ENTERING),$(if $(filter command environment,$(firstword $(origin $(v)))),\
  $(if $(findstring $$,$(value $(v))),$(error $(v)=$(value $(v)): make would expand the \
  '$$' in it (a $$(...) would run); give $(v) without '$$'))))
# Nor may one start with '-': bench, docker or ssh would read it as an option of theirs
# (RESULTS=--help printed bench report's help). MATRIX_ARGS alone is flags by design.
$(foreach v,$(filter-out MATRIX_ARGS,$(ENTERING)),\
  $(if $(filter command environment,$(firstword $(origin $(v)))),\
  $(if $(filter -%,$(firstword $(value $(v)))),$(error $(v)=$(value $(v)): starts with '-', \
  which the command it reaches would read as an option; give $(v) a value that does not))))
# Every other variable is the Makefile's own (RUN_TAG, CPU_ENV_FILE, the recipe fragments):
# given on the command line it would become recipe text unchecked, so it is refused (also
# one a parent make was given, which arrives the same way). `make -e` would let the
# environment override them all alike: refused too.
$(if $(findstring e,$(firstword -$(MAKEFLAGS))),$(error make -e: the environment would \
  override this Makefile's own variables; run make without -e and give settings as NAME=value))
$(foreach v,$(.VARIABLES),$(if $(filter command,$(firstword $(origin $(v)))),\
  $(if $(filter-out $(ENTERING),$(v)),$(error $(v): given on the command line, but not a \
  setting of this Makefile; drop it (the settings: $(ENTERING))))))
$(foreach v,$(USER_VARIABLES),$(eval export MK_$(v) = $$($(v))))
# A value quoted for the shell, for the one place make itself runs a command ($(shell)).
q = '$(subst ','\'',$(1))'

PYTHON ?= python3
VENV ?= .venv
PY = "$$MK_VENV/bin/python"
# The node's settings: compose/.env when present, else the documented defaults.
NODE_ENV ?= $(if $(wildcard compose/.env),compose/.env,compose/.env.example)
# NODE_ENV is a path that make itself reads ($(shell sed ...) below) and that bench hands
# to other hosts (--env-file of the ssh and Slurm launchers): one word of letters, digits
# and _ . / + - @ % : only. No quote, backtick, blank, newline or other shell syntax can
# reach a shell through it, whatever quoting comes after.
path_chars := a b c d e f g h i j k l m n o p q r s t u v w x y z A B C D E F G H I J K L \
  M N O P Q R S T U V W X Y Z 0 1 2 3 4 5 6 7 8 9 _ . / + - @ % :
without = $(if $(2),$(call without,$(subst $(firstword $(2)),,$(1)),$(wordlist 2,$(words $(2)),$(2))),$(1))
ifneq ($(call without,$(NODE_ENV),$(path_chars))|$(words $(NODE_ENV))|$(strip $(NODE_ENV)),|1|$(NODE_ENV))
$(error NODE_ENV: a settings file's path of letters, digits and _ . / + - @ % : only (no blank, quote, backtick or other shell character), e.g. compose/.env)
endif
# The trainer services read the same file as their env_file (Compose resolves it for every
# service, even in profiles not started).
export BENCH_ENV_FILE := $(abspath $(NODE_ENV))
env_value = $(shell sed -n 's/^$(1)=//p' -- $(call q,$(NODE_ENV)) | tail -n 1)
IMAGE ?= $(call env_value,IMAGE)
CPU_IMAGE ?= $(call env_value,CPU_IMAGE)
NFS_IMAGE ?= $(call env_value,NFS_IMAGE)
# Read once, not once per recipe (every exported variable is expanded for each recipe).
IMAGE := $(IMAGE)
CPU_IMAGE := $(CPU_IMAGE)
NFS_IMAGE := $(NFS_IMAGE)
# A command (two words for Compose v2): recipes split it at blanks ($$COMPOSE, unquoted).
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
COMPOSE := $(COMPOSE)
export COMPOSE
TORCH_FLAVOUR ?= default
# The CUDA base image of TORCH_FLAVOUR's CUDA line: docker/cuda-flavours.tsv is the table.
CUDA_BASE_IMAGE ?= $(shell awk -F'\t' -v f=$(call q,$(TORCH_FLAVOUR)) '$$1 == f {print $$4}' docker/cuda-flavours.tsv)
CUDA_BASE_IMAGE := $(CUDA_BASE_IMAGE)
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
# The GPU targets train as a lab does on GPUs (issue 28): autocast mixed precision,
# PRECISION=auto (bf16 where every GPU of the job has it natively, else fp16 with a
# GradScaler), in the channels-last memory format (gpu_workload, below). Strict fp32 as
# before: PRECISION=fp32 MATRIX_ARGS=--no-channels-last (node-up: --no-channels-last in
# BENCH_ARGS). node-up on PROFILE=cpu and every other target keep fp32. Before PRECISION's
# own default: a target's `?=` applies only where the variable is not defined yet.
bench-single bench-multigpu bench-multinode: PRECISION ?= auto
node-up: PRECISION ?= $(if $(filter cpu,$(PROFILE)),fp32,auto)
PRECISION ?= fp32
EPOCHS ?= 1
CPU_IMAGE_SIZE ?= 32
CPU_TRAIN_SAMPLES ?= 4096
CPU_EVAL_SAMPLES ?= 2000

.PHONY: help venv host docker wheels wheels-cpu build build-cpu build-nfs base-image \
        gpu-ready bench-single bench-multigpu bench-cpu bench-comm bench-emulated bench-predict bench-accuracy bench-accuracy-grid bench-straggler accept bench-overhead bench-container-overhead bench-launch-overhead bench-matrix bench-multinode bench-slurm k8s-manifests bench-oom doctor table plot report node-up nfs-up nfs-down \
        dataset settings test test-deps unit lint clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | \
	  awk 'BEGIN {FS = ":.*## "}; {printf "  %-16s %s\n", $$1, $$2}'

# --- host set-up ---------------------------------------------------------------------------
$(VENV)/.installed: requirements.txt requirements-host.txt pyproject.toml
	@echo "venv: installing the pinned requirements into $$MK_VENV (torch is large: a few minutes the first time)"
	@"$$MK_PYTHON" -c 'import ensurepip, venv' 2>/dev/null || scripts/install-host.sh venv
	"$$MK_PYTHON" -m venv -- "$$MK_VENV"
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-host.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch -- "$$MK_VENV/.installed"

venv: $(VENV)/.installed ## create the host venv from the pinned requirements

host: ## install missing host packages (Docker engine, Compose, dataset, debootstrap, GPU toolkit)
	scripts/install-host.sh

docker: ## install Docker and Compose if missing, start the daemon if it is not running
	@scripts/ensure-docker.sh

# Debian's dataset-fashion-mnist, where FASHION_MNIST_DIR is missing.
define fashion_mnist
if [ ! -d "$$MK_FASHION_MNIST_DIR" ]; then \
  echo "Fashion-MNIST not found in $$MK_FASHION_MNIST_DIR: installing Debian's dataset-fashion-mnist"; \
  scripts/install-host.sh dataset; \
fi
endef

# --- images --------------------------------------------------------------------------------
wheels: venv ## download the GPU image's wheels on the host (TORCH_FLAVOUR: see docker/cuda-flavours.tsv)
	PYTHON="$$MK_VENV/bin/python" scripts/download-wheels.sh ".wheels/py$$MK_CUDA_BASE_PYTHON-$$MK_TORCH_FLAVOUR" "$$MK_CUDA_BASE_PYTHON" "$$MK_TORCH_FLAVOUR"

wheels-cpu: venv ## download the CPU image's wheels on the host
	PYTHON="$$MK_VENV/bin/python" scripts/download-wheels.sh ".wheels/py$$MK_CPU_BASE_PYTHON-default" "$$MK_CPU_BASE_PYTHON" default

base-image: docker ## build the local Debian base image (for sites without a registry)
	scripts/make-base-image.sh "$$MK_LOCAL_BASE_IMAGE"

build: docker venv ## build the GPU trainer image (IMAGE, TORCH_FLAVOUR: default, cu130, cu126)
	@[ -n "$$MK_CUDA_BASE_IMAGE" ] || { echo "build: TORCH_FLAVOUR=$$MK_TORCH_FLAVOUR: not in docker/cuda-flavours.tsv: choose default, cu130 or cu126, or give its CUDA_BASE_IMAGE too" >&2; exit 2; }
	PYTHON="$$MK_VENV/bin/python" scripts/build-image.sh trainer "$$MK_IMAGE" "$$MK_CUDA_BASE_IMAGE" "$$MK_CUDA_BASE_PYTHON" "$$MK_TORCH_FLAVOUR"

build-cpu: docker venv ## build the CPU trainer image (CPU_IMAGE) from the same Dockerfile
	PYTHON="$$MK_VENV/bin/python" scripts/build-image.sh trainer "$$MK_CPU_IMAGE" "$$MK_CPU_BASE_IMAGE" "$$MK_CPU_BASE_PYTHON" default

build-nfs: docker ## build the NFS server image (NFS_IMAGE)
	scripts/build-image.sh nfs "$$MK_NFS_IMAGE" "$$MK_NFS_BASE_IMAGE"

# --- data and the NFS server ---------------------------------------------------------------
dataset: venv ## stage DATASET=fashion-mnist|cifar10|imagefolder [SRC=dir] into the export, with a manifest
	@if [ "$$MK_DATASET" = fashion-mnist ] && [ -z "$$MK_SRC" ]; then $(fashion_mnist); fi
	$(PY) -m bench dataset stage "$$MK_DATASET" --export "$$MK_EXPORT_DIR" $${MK_SRC:+--src "$$MK_SRC"}

# $(1): the Compose arguments after the command, for the NFS server's project.
nfs_compose = $$COMPOSE -p bench-nfs -f compose/docker-compose.yml --env-file "$$MK_NODE_ENV" --profile nfs $(1)

nfs-up: venv docker ## serve the export over NFSv4 (profile nfs), wait until healthy
	$(PY) -m bench settings --env-file "$$MK_NODE_ENV" --profile nfs
	$(call nfs_compose,up -d nfs)
	@for i in $$(seq 30); do \
	  status=$$(docker inspect -f '{{.State.Health.Status}}' $$($(call nfs_compose,ps -q nfs)) 2>/dev/null); \
	  if [ "$$status" = healthy ]; then echo "nfs: serving $$MK_EXPORT_DIR on TCP 2049"; exit 0; fi; sleep 2; \
	done; echo "nfs: not healthy after 60 s; logs:"; \
	$(call nfs_compose,logs --tail 20 nfs); \
	$(MAKE) --no-print-directory nfs-down; exit 1

nfs-down: ## stop the NFS server
	$(call nfs_compose,down -t 5)

# --- benchmarks ----------------------------------------------------------------------------
settings: venv ## check this node's settings (NODE_ENV, PROFILE) without starting anything
	$(PY) -m bench settings --env-file "$$MK_NODE_ENV" --profile "$$MK_PROFILE"

# The trainer image of PROFILE (cpu: CPU_IMAGE, else IMAGE), in the shell variable `image`.
pick_image = image=$$MK_IMAGE; [ "$$MK_PROFILE" != cpu ] || image=$$MK_CPU_IMAGE

# BENCH_ARGS of the settings file as separate arguments (shlex, as a shell would split
# them, but nothing is run), NUL-separated for mapfile; one that cannot be split: one line
# naming it, exit 2 (the recipe runs it once to check before reading its words).
define split_bench_args
import sys
from pathlib import Path
from bench.host.settings import ConfigError, bench_args, read_env_file
try:
    sys.stdout.write("\0".join(bench_args(read_env_file(Path(sys.argv[1])))))
except ConfigError as error:
    print(f"node-up: error: {error}", file=sys.stderr)
    sys.exit(2)
endef
export split_bench_args

# The trainer flags of the GPU targets (bench-single, bench-multigpu, bench-multinode, and
# node-up on the gpu and gpu-ib profiles), in the shell array `workload_extra`: the trainers
# must see CUDA, and train channels-last. They come before MATRIX_ARGS and BENCH_ARGS,
# whose flags win (a flag's last value counts): --no-channels-last turns it off.
gpu_workload = workload_extra=(--device cuda --channels-last)

# The trainer flags: PRECISION, the GPU profiles' gpu_workload, then BENCH_ARGS (the job's
# own flags win over the target's defaults).
node-up: venv ## join the job described by NODE_ENV on this node (PROFILE=gpu|gpu-ib|cpu; NODE_RANK=i); GPU profiles: PRECISION (auto), channels-last
	@$(pick_image); $(PY) -c "$$split_bench_args" "$$MK_NODE_ENV" > /dev/null || exit 2; \
	mapfile -d '' -t bench_args < <($(PY) -c "$$split_bench_args" "$$MK_NODE_ENV"); \
	workload_extra=(); [ "$$MK_PROFILE" = cpu ] || $(gpu_workload); \
	$(PY) -m bench compose --profile "$$MK_PROFILE" --env-file "$$MK_NODE_ENV" --only-this-node \
	  --image "$$image" -- --precision "$$MK_PRECISION" "$${workload_extra[@]}" "$${bench_args[@]}"

show_results = $(PY) -m bench table "$$MK_RESULTS" && $(PY) -m bench report "$$MK_RESULTS"; \
  echo "results: $$MK_RESULTS"

# The batch-size x topology matrix (python -m bench matrix), the one path of every benchmark
# target: natively or through Compose on this host (bench-matrix, bench-single,
# bench-multigpu, bench-cpu), or one node per host over SSH (bench-multinode). Each job is
# a fresh one with repeats, ETA, --resume and one console line; each target ends with the
# tables, the plots and the results path. The exit status says whether a cell failed (2: a
# refused setting, nothing ran). Shell arrays set by the target: `launcher` (--launcher
# NAME) and `workload` (trainer flags; default: MODE's --steps STEPS or --epochs EPOCHS);
# the shell variable `topologies` overrides TOPOLOGIES. MATRIX_ARGS adds trainer flags,
# split at blanks (no quotes, no globbing).
# A launcher's settings (IMAGE, PARTITION, HOSTS, ...) reach bench as the environment
# variables BENCH_LAUNCHER_<FLAG>, exported per target: bench applies
# those of the chosen launcher (a flag would win), ignores the others and treats an empty
# one as unset, so no recipe restates which launcher takes which flag
# (bench/host/launchers/registry.py). Like MK_*, a value is never recipe text.
# $(call image_settings,TARGETS,IMAGE,SETTINGS FILE,PROFILE): the trainer image, node settings
# and Compose service TARGETS pass (empty: left to the launcher's default).
image_settings = $(eval $(1): export BENCH_LAUNCHER_IMAGE = $(2))$(eval $(1): export \
  BENCH_LAUNCHER_ENV_FILE = $(3))$(eval $(1): export BENCH_LAUNCHER_PROFILE = $(4))
# After a matrix: exit 1 means it recorded a failed cell (its row says why), so the target
# goes on to its next matrix or round and fails after the last; any other code, a user
# error (2) or a signal (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), stops the target at once
# with that code (a stopped benchmark must not start its next part).
matrix_failed = || { rc=$$?; [ "$$rc" = 1 ] || exit "$$rc"; failed=1; }
define matrix_jobs
read -r -a matrix_args <<< "$$MK_MATRIX_ARGS"; \
if [ -z "$${workload+set}" ]; then \
  case "$$MK_MODE" in steps) workload=(--steps "$$MK_STEPS");; \
    epochs) workload=(--epochs "$$MK_EPOCHS");; \
    *) echo "$@: MODE=$$MK_MODE: use MODE=steps (throughput) or MODE=epochs (time to train)" >&2; exit 2;; esac; fi; \
$(PY) -m bench matrix --batch-sizes "$$MK_BATCH_SIZES" \
  --topologies "$${topologies:-$$MK_TOPOLOGIES}" --models "$$MK_MODEL" \
  --precisions "$$MK_PRECISION" --repeats "$$MK_REPEATS" --results "$$MK_RESULTS" \
  "$${launcher[@]}" -- "$${workload[@]}" "$${workload_extra[@]}" "$${matrix_args[@]}" \
  $(matrix_failed)
endef
define matrix_run
failed=0; $(matrix_jobs); \
$(PY) -m bench plot "$$MK_RESULTS" >/dev/null 2>&1 || true; $(show_results); exit $$failed
endef
MODE ?= steps
gpu_launcher = launcher=(--launcher compose); $(gpu_workload)
$(call image_settings,bench-single bench-multigpu,$$(IMAGE),$$(NODE_ENV),gpu)

# What bench-single and bench-multigpu need before their matrix: Docker gives containers a
# GPU the image's torch can use (else one line naming the missing piece, before any build),
# and the GPU image is built.
gpu-ready:
	@scripts/check-gpu.sh "$$MK_TORCH_FLAVOUR" >/dev/null
	@$(MAKE) --no-print-directory build venv

# The topologies of bench-multigpu, from the shell variable `gpus` (scripts/check-gpu.sh's
# count) in the shell variable `topologies`: 1x1, 1x2, 1x4... (the powers of two below the
# count), then 1xN, all of this node's GPUs.
define gpu_ladder
topologies=1x1; for ((n = 2; n < gpus; n *= 2)); do topologies+=",1x$$n"; done; \
[ "$$gpus" = 1 ] || topologies+=",1x$$gpus"
endef

bench-single: TOPOLOGIES ?= 1x1
bench-single: REPEATS ?= 1
bench-single: RESULTS ?= results/single-$(RUN_TAG).jsonl
bench-single: gpu-ready ## one GPU of this node in autocast bf16 (fp16 where the GPU lacks it), channels-last: MODEL, BATCH_SIZES, STEPS (or MODE=epochs EPOCHS), PRECISION (auto; strict fp32: PRECISION=fp32 MATRIX_ARGS=--no-channels-last), REPEATS
	@$(gpu_launcher); \
	$(matrix_run)

bench-multigpu: REPEATS ?= 1
bench-multigpu: RESULTS ?= results/multigpu-$(RUN_TAG).jsonl
bench-multigpu: gpu-ready ## 1, 2, 4... and all GPUs of this node (1x1, 1x2, 1x4, ..., 1xN): as bench-single
	@gpus=$$(scripts/check-gpu.sh "$$MK_TORCH_FLAVOUR"); $(gpu_ladder); \
	$(gpu_launcher); \
	$(matrix_run)

# CI's main job: one node, then 2 trainer containers as node ranks 0 and 1 on loopback (1x1
# and 2x1: the table shows speedup and efficiency), the dataset bind-mounted (CI's kernel
# has no NFS client); synthetic data, then real Fashion-MNIST trained for EPOCHS. The
# "nodes" share this host's cores (one thread each) and talk over lo only.
CPU_ENV_FILE := build/cpu-$(RUN_TAG).env
define cpu_workload
if [ $$kind = synthetic ]; then \
  workload=(--steps "$$MK_STEPS" --image-size "$$MK_CPU_IMAGE_SIZE"); \
else \
  workload=(--epochs "$$MK_EPOCHS" --data fashion-mnist --data-dir /data/fashion-mnist \
    --image-size "$$MK_CPU_IMAGE_SIZE" --max-train-samples "$$MK_CPU_TRAIN_SAMPLES" \
    --max-eval-samples "$$MK_CPU_EVAL_SAMPLES" --workers 1); \
fi
endef
bench-cpu: TOPOLOGIES ?= 1x1,2x1
bench-cpu: REPEATS ?= 1
bench-cpu: RESULTS ?= results/cpu-$(RUN_TAG).jsonl
$(call image_settings,bench-cpu,$$(CPU_IMAGE),$$(CPU_ENV_FILE),cpu)
bench-cpu: venv build-cpu ## the CPU profile: 1 and 2 containers as nodes, synthetic + Fashion-MNIST
	@$(MAKE) --no-print-directory dataset DATASET=fashion-mnist
	@trap 'rm -f -- $(CPU_ENV_FILE)' EXIT; \
	export_dir=$$(realpath -m -- "$$MK_EXPORT_DIR") && \
	  case $$export_dir in *[[:cntrl:]]*) echo "bench-cpu: EXPORT_DIR=$$MK_EXPORT_DIR: a path without control characters" >&2; exit 2;; esac && \
	  mkdir -p build && \
	  { grep -v -e '^DATA_MOUNT_TYPE=' -e '^DATA_MOUNT_OPTIONS=' -e '^DATA_DEVICE=' -- "$$MK_NODE_ENV" > $(CPU_ENV_FILE) || [ $$? = 1 ]; } && \
	  printf 'DATA_MOUNT_TYPE=none\nDATA_MOUNT_OPTIONS=bind\nDATA_DEVICE=%s\nOMP_NUM_THREADS=1\nGLOO_SOCKET_IFNAME=lo\n' \
	    "$$export_dir" >> $(CPU_ENV_FILE) || exit; \
	failed=0; launcher=(--launcher compose); \
	for kind in synthetic fashion-mnist; do $(cpu_workload); $(matrix_jobs); done; \
	$(PY) -m bench plot "$$MK_RESULTS" >/dev/null 2>&1 || true; $(show_results); exit $$failed

LAUNCHER ?= native
RUNTIME ?= compose
HOSTS ?=
host_count = $(words $(subst $(comma), ,$(HOSTS)))
comma := ,
# HOSTS checked as make users name it (one line, exit 2) before anything starts.
define check_hosts_py
import os, sys
from bench.options import ConfigError
from bench.topology import parse_hosts
try:
    parse_hosts(os.environ["MK_HOSTS"], "HOSTS")
except ConfigError as error:
    print(f"{sys.argv[1]}: error: {error}", file=sys.stderr)
    sys.exit(2)
endef
export check_hosts_py
check_hosts = $(PY) -c "$$check_hosts_py" $@

bench-matrix bench-multinode bench-overhead bench-launch-overhead bench-container-overhead: REPEATS ?= 3
bench-matrix: BATCH_SIZES ?= 32 64
bench-matrix: MODEL ?= resnet18
bench-matrix: STEPS ?= 10
bench-matrix: TOPOLOGIES ?= 1x1,1x2,2x1
bench-matrix: RESULTS ?= results/matrix-$(RUN_TAG).jsonl
# Compose's settings, ignored by the native launcher.
$(call image_settings,bench-matrix,$$(CPU_IMAGE),$$(NODE_ENV),cpu)
bench-matrix: venv ## BATCH_SIZES x TOPOLOGIES on this host (LAUNCHER=native|compose, REPEATS, MODEL)
	@launcher=(--launcher "$$MK_LAUNCHER"); \
	$(matrix_run)

bench-multinode: BATCH_SIZES ?= 64 128 256
bench-multinode: MODEL ?= resnet50
bench-multinode: STEPS ?= 50
bench-multinode: TOPOLOGIES ?= 1x1,$(host_count)x1
bench-multinode: RESULTS ?= results/multinode-$(RUN_TAG).jsonl
bench-multinode: export BENCH_LAUNCHER_HOSTS = $(HOSTS)
bench-multinode: export BENCH_LAUNCHER_RUNTIME = $(RUNTIME)
$(call image_settings,bench-multinode,$$(IMAGE),$$(BENCH_ENV_FILE),gpu)
bench-multinode: venv ## the matrix across HOSTS=h1,h2[,...] over SSH, one node per host (RUNTIME=compose|native), on GPUs as bench-single
	@[ -n "$$MK_HOSTS" ] || { echo "bench-multinode: HOSTS='': set HOSTS=host1,host2[,...] (the first leads)" >&2; exit 2; }
	@$(check_hosts)
	@launcher=(--launcher ssh); $(gpu_workload); \
	$(matrix_run)

# Acceptance (issue 27): HOSTS=h1,h2[,...] over SSH, one node per host with GPUS_PER_NODE
# processes; without HOSTS, four emulated hosts on this machine behind LINK (root).
accept: RESULTS ?= results/accept-$(RUN_TAG)
accept: LINK ?= 1gbit
accept: export BENCH_LAUNCHER_HOSTS = $(HOSTS)
accept: export BENCH_LAUNCHER_RUNTIME = $(RUNTIME)
accept: export BENCH_LAUNCHER_LINK = $(LINK)
accept: venv ## does the cluster work? PASS/WARN/FAIL per device, link and the whole job: HOSTS=h1,h2 over SSH, else 4 emulated hosts (LINK, root)
	@if [ -n "$$MK_HOSTS" ]; then $(check_hosts) || exit 2; \
	  launcher=(--launcher ssh --nodes $(host_count) --gpus "$${MK_GPUS_PER_NODE:-1}"); \
	else launcher=(--launcher netns --nodes 4); fi; \
	$(PY) -m bench accept --out "$$MK_RESULTS" "$${launcher[@]}"

# Slurm: each repeat one batch job, one srun task per node (see README, "On Slurm").
PARTITION ?=
ACCOUNT ?=
TIME_LIMIT ?=
SLURM_RUNTIME ?= native
bench-slurm: NODES_PER_JOB ?= 2
bench-slurm: GPUS_PER_NODE ?= 1
bench-slurm: BATCH_SIZES ?= 64 128
bench-slurm: MODEL ?= resnet50
bench-slurm: STEPS ?= 50
bench-slurm: REPEATS ?= 1
bench-slurm: RESULTS ?= results/slurm-$(RUN_TAG).jsonl
# Empty ones are unset (the cluster's partition, no account, the deadline's time limit);
# the image and settings file only matter to SLURM_RUNTIME=compose.
bench-slurm: export BENCH_LAUNCHER_RUNTIME = $(SLURM_RUNTIME)
bench-slurm: export BENCH_LAUNCHER_GPUS_PER_NODE = $(GPUS_PER_NODE)
bench-slurm: export BENCH_LAUNCHER_PARTITION = $(PARTITION)
bench-slurm: export BENCH_LAUNCHER_ACCOUNT = $(ACCOUNT)
bench-slurm: export BENCH_LAUNCHER_TIME_LIMIT = $(TIME_LIMIT)
$(call image_settings,bench-slurm,$$(IMAGE),$$(BENCH_ENV_FILE),)
bench-slurm: venv ## the matrix as Slurm jobs: PARTITION, NODES_PER_JOB, GPUS_PER_NODE (0: CPU), TIME_LIMIT, ACCOUNT, SLURM_RUNTIME
	@case "$$MK_GPUS_PER_NODE" in ''|*[!0-9]*) echo "bench-slurm: GPUS_PER_NODE=$$MK_GPUS_PER_NODE: a whole number, 0 for CPU jobs" >&2; exit 2;; esac; \
	case "$$MK_NODES_PER_JOB" in ''|0|*[!0-9]*) echo "bench-slurm: NODES_PER_JOB=$$MK_NODES_PER_JOB: a whole number of nodes, 1 or more" >&2; exit 2;; esac; \
	per_node=$$MK_GPUS_PER_NODE; [ "$$per_node" != 0 ] || per_node=1; \
	topologies="1x$$per_node,$$MK_NODES_PER_JOB""x$$per_node"; \
	launcher=(--launcher slurm); \
	if [ "$$MK_GPUS_PER_NODE" = 0 ]; then workload_extra=(--device cpu); else workload_extra=(--device cuda); fi; \
	$(matrix_run)

# Kubernetes: one job as manifests, from the node settings (see README, "On Kubernetes"):
# job.yaml (a headless Service and an Indexed Job) and pytorchjob.yaml (Kubeflow).
K8S_DIR ?= results/k8s
K8S_NAMESPACE ?= default
RESULTS_CLAIM ?= bench-results
SHM_SIZE ?= 8Gi
k8s-manifests: NODES_PER_JOB ?= 2
k8s-manifests: GPUS_PER_NODE ?= 1
k8s-manifests: BATCH_SIZES ?= 64
k8s-manifests: MODEL ?= resnet50
k8s-manifests: STEPS ?= 50
$(call image_settings,k8s-manifests,$$(IMAGE),$$(NODE_ENV),$$(PROFILE))
k8s-manifests: export BENCH_LAUNCHER_NAMESPACE = $(K8S_NAMESPACE)
k8s-manifests: export BENCH_LAUNCHER_RESULTS_CLAIM = $(RESULTS_CLAIM)
k8s-manifests: export BENCH_LAUNCHER_SHM_SIZE = $(SHM_SIZE)
k8s-manifests: venv ## one job as Kubernetes manifests in K8S_DIR: IMAGE, PROFILE, NODES_PER_JOB, GPUS_PER_NODE, K8S_NAMESPACE, RESULTS_CLAIM, SHM_SIZE
	@case "$$MK_GPUS_PER_NODE" in ''|0|*[!0-9]*) echo "k8s-manifests: GPUS_PER_NODE=$$MK_GPUS_PER_NODE: a whole number, 1 or more (processes per pod on PROFILE=cpu)" >&2; exit 2;; esac; \
	case "$$MK_NODES_PER_JOB" in ''|0|*[!0-9]*) echo "k8s-manifests: NODES_PER_JOB=$$MK_NODES_PER_JOB: a whole number of nodes, 1 or more" >&2; exit 2;; esac; \
	case "$$MK_K8S_DIR" in ''|-*) echo "k8s-manifests: K8S_DIR=$$MK_K8S_DIR: the manifests' directory, e.g. results/k8s (empty would write into /)" >&2; exit 2;; esac; \
	if [ "$$MK_PROFILE" = cpu ]; then device=cpu; else device=cuda; fi; \
	for kind in indexed pytorchjob; do \
	  if [ $$kind = indexed ]; then file=job.yaml; else file=pytorchjob.yaml; fi; \
	  $(PY) -m bench k8s render --output "$$MK_K8S_DIR/$$file" --k8s-kind $$kind \
	    --topologies "$$MK_NODES_PER_JOB""x$$MK_GPUS_PER_NODE" --models "$$MK_MODEL" \
	    --batch-sizes "$$MK_BATCH_SIZES" -- --steps "$$MK_STEPS" --device $$device || exit $$?; \
	done; \
	echo "kubectl apply -f $$MK_K8S_DIR/job.yaml   # or pytorchjob.yaml where the training operator runs"

# The multi-GPU study's result: the deep & wide MLP does not fit one device, nor two under
# DDP (every rank holds the whole model), and fits two when FSDP shards it. Each rank may
# allocate MEMORY_CAP beyond what it holds once torch is up (a smaller machine, on CPU);
# on GPUs, CUDA's own out-of-memory does the same. OOM rows are the expected outcome of the
# ddp runs (their matrix exits 1 on them); the target fails where the fsdp run fails.
bench-oom: MLP_WIDTH ?= 2048
bench-oom: MLP_DEPTH ?= 8
bench-oom: MEMORY_CAP ?= 300MiB
bench-oom: BATCH_SIZES ?= 8
bench-oom: STEPS ?= 5
bench-oom: RESULTS ?= results/oom-$(RUN_TAG).jsonl
bench-oom: venv ## deep & wide MLP under MEMORY_CAP per rank: 1x1 ddp (oom), 1x2 ddp (oom), 1x2 fsdp (ok)
	@fsdp_failed=0; for run in "1x1,1x2 ddp" "1x2 fsdp"; do read -r topologies strategy <<< "$$run"; \
	  failed=0; $(PY) -m bench matrix --models mlp --batch-sizes "$$MK_BATCH_SIZES" --topologies "$$topologies" \
	    --strategies "$$strategy" --repeats 1 --results "$$MK_RESULTS" -- --device cpu \
	    --mlp-width "$$MK_MLP_WIDTH" --mlp-depth "$$MK_MLP_DEPTH" --memory-cap "$$MK_MEMORY_CAP" \
	    --steps "$$MK_STEPS" --warmup-steps 1 --comm-probe-steps 0 $(matrix_failed); \
	  [ "$$strategy" = ddp ] || fsdp_failed=$$failed; done; \
	$(PY) -m bench table "$$MK_RESULTS" --group-by batch,model,strategy --columns peak_memory; \
	echo "results: $$MK_RESULTS"; [ "$$fsdp_failed" = 0 ] || { echo "bench-oom: the 1x2 fsdp \
	run failed, where FSDP should fit MEMORY_CAP=$$MK_MEMORY_CAP: its row in $$MK_RESULTS says why" >&2; exit 1; }

doctor: venv ## preflight of HOSTS=h1,h2: ssh, docker, image, GPU (TORCH_FLAVOUR's driver, NVSwitch Fabric Manager, GPUS_PER_NODE, default 1), MIG mode, HCAs (PROFILE=gpu-ib), interface, ports, shm, data, clocks
	@[ -n "$$MK_HOSTS" ] || { echo "doctor: HOSTS='': set HOSTS=host1,host2[,...] (the first leads)" >&2; exit 2; }
	@$(check_hosts)
	@$(pick_image); per_node=$${MK_GPUS_PER_NODE:-1}; [ "$$MK_PROFILE" != cpu ] || per_node=0; \
	$(PY) -m bench doctor --hosts "$$MK_HOSTS" --image "$$image" --env-file "$$MK_NODE_ENV" \
	  --torch-flavour "$$MK_TORCH_FLAVOUR" --gpus-per-node "$$per_node" --profile "$$MK_PROFILE"

# RESULTS, else the newest results file under results/ (without those whose names match
# the grep pattern $(1)), in the shell variable `results`; none: one line, exit 2.
define pick_results
results=$$MK_RESULTS; \
if [ -z "$$results" ]; then \
  results=$$(ls -t results/*.jsonl 2>/dev/null $(if $(1),| grep -v -e '$(1)') | head -n 1); \
  if [ -z "$$results" ]; then \
    echo "$@: RESULTS='': no results file in results/: run a benchmark first (make bench-cpu) or set RESULTS=path/to/runs.jsonl" >&2; \
    exit 2; \
  fi; \
  echo "$@: RESULTS=$$results (the newest results file)" >&2; \
fi
endef

table: venv ## tables of RESULTS (default: the newest results file; FORMAT=markdown|github|csv|latex)
	@$(pick_results); $(PY) -m bench table "$$results" --format "$${MK_FORMAT:-markdown}"

plot: venv ## PNG charts beside RESULTS (default: the newest results file)
	@$(pick_results); $(PY) -m bench plot "$$results"

report: venv ## RESULTS.md and a self-contained RESULTS.html: provenance, tables, plots, summary
	@$(pick_results); $(PY) -m bench report "$$results"

bench-comm: COMM_TOPOLOGIES ?= 1x2
bench-comm: RESULTS ?= results/comm-$(RUN_TAG).jsonl
bench-comm: venv ## all-reduce busbw sweep on this host (COMM_TOPOLOGIES, MAX_SIZE), table + plot
	$(PY) -m bench matrix --workload allreduce --topologies "$$MK_COMM_TOPOLOGIES" \
	  --results "$$MK_RESULTS" -- $${MK_MAX_SIZE:+--max-size "$$MK_MAX_SIZE"}
	$(PY) -m bench plot "$$MK_RESULTS"

# The lab's 1 GbE finding in miniature, on emulated hosts (root): the link's all-reduce
# sweep, then 1 node vs 2 nodes with and without compression, then the prediction beside it.
bench-emulated: LINK ?= 1gbit
bench-emulated: MODEL ?= resnet18
bench-emulated: BATCH_SIZES ?= 16
bench-emulated: COMM_HOOKS ?= none,powersgd
bench-emulated: STEPS ?= 20
bench-emulated: REPEATS ?= 3
bench-emulated: RESULTS ?= results/emulated-$(LINK)-$(RUN_TAG).jsonl
bench-emulated: STEADY_S ?= 30
bench-emulated: export BENCH_LAUNCHER_LINK = $(LINK)
# The sweep's file beside RESULTS: x.jsonl -> x-comm.jsonl.
emulated_comm = "$${MK_RESULTS%.jsonl}-comm.jsonl"
# This machine's own drift (bench steadiness), before the rounds and after: x-steadiness.jsonl.
emulated_steadiness = "$${MK_RESULTS%.jsonl}-steadiness.jsonl"
emulated_steady = [ "$$MK_STEADY_S" = 0 ] || $(PY) -m bench steadiness \
  --out $(emulated_steadiness) --seconds "$$MK_STEADY_S"
# The workload whose step sizes the cells' window (as the sweep's probe ran it), and the rule.
emulated_window = --batch-size "$${MK_BATCH_SIZES%%[ ,]*}" --image-size 32 \
  --steps "$$MK_STEPS" $${MK_MIN_TIMED_S:+--min-timed-s "$$MK_MIN_TIMED_S"}
# The cells' matrix, checked (--dry-run, with --repeats REPEATS) before the sweep, so that a
# bad value of any of its settings (RESULTS, COMM_HOOKS, REPEATS...) stops the target before
# minutes of sweep; then run one repeat a round, each hook's 1-node cell before its 2-node
# cell and again after it (--bracket), so that the machine's drift between them cancels.
emulated_cells = --launcher netns --interleave --bracket --topologies 1x1,2x1 --models "$$MK_MODEL" \
  --batch-sizes "$$MK_BATCH_SIZES" --comm-hooks "$$MK_COMM_HOOKS" --results "$$MK_RESULTS"
emulated_train = --warmup-steps 10 --powersgd-warmup 5 --image-size 32 --log-every 0
# The sweep's lockstep probe also times MODEL's own steps at the first of BATCH_SIZES, at the
# cells' 32 px: what the job's syncs wait for the slower host (bench predict charges it).
bench-emulated: venv ## 1 vs 2 namespace nodes behind a shaped LINK (1gbit, 5gbit...): REPEATS (3) rounds of the sweep then the cells (each STEPS, or MIN_TIMED_S (15) seconds of steps where more, the 1-node cells bracketing the 2-node ones), prediction; the CPUs' own drift for STEADY_S (30) s before and after
	$(PY) -m bench.host.timed_window --check-only --model "$$MK_MODEL" $(emulated_window)
	$(PY) -m bench matrix --dry-run $(emulated_cells) --repeats "$$MK_REPEATS" -- \
	  --steps "$$MK_STEPS" --comm-probe-steps "$$MK_STEPS" $(emulated_train) >/dev/null
	[ "$$MK_STEADY_S" = 0 ] || $(PY) -m bench steadiness --check-only \
	  --out $(emulated_steadiness) --seconds "$$MK_STEADY_S"
	@[ "$$MK_STEADY_S" = 0 ] || echo "bench-emulated: first, for STEADY_S ($$MK_STEADY_S) seconds, the same matrix-multiply loop on every CPU at once (bench steadiness; again after the rounds): how far this machine drifts by itself, which bench predict sets beside measured / predicted (STEADY_S=0 skips it)" >&2
	$(emulated_steady)
	@echo "bench-emulated: as make bench-accuracy runs: in $$MK_REPEATS rounds (REPEATS, for a band), each the link's sweep and then one repeat of every cell, interleaved, so that the machine's drift reaches the sweep and the cells alike, each hook's 1-node cell run again after its 2-node cell (bracketed: the 1-node figure is then measured on both sides of the 2-node one); each cell timed for STEPS steps, or more where they would last under MIN_TIMED_S (default 15) seconds on one node at the step the first sweep's probe timed (at the first of BATCH_SIZES), its probe steps after training (the 1-node bucket timeline) as many, and the 1-node cell beside a busy neighbour on the spare emulated host, so every node of every cell computes on the same share of this machine" >&2
	failed=0; for round in $$(seq "$$MK_REPEATS"); do \
	  echo "bench-emulated: round $$round of $$MK_REPEATS: the sweep, then every cell" >&2; \
	  $(PY) -m bench matrix --workload allreduce --launcher netns --topologies 2x1 \
	    --results $(emulated_comm) -- --max-size 64MiB --iters 10 --warmup-iters 2 \
	    --beside-compute --lockstep --lockstep-model "$$MK_MODEL" \
	    --lockstep-batch-size "$${MK_BATCH_SIZES%%[ ,]*}" --lockstep-image-size 32 \
	    $(matrix_failed); \
	  if [ "$$round" = 1 ]; then \
	    steps=$$($(PY) -m bench.host.timed_window $(emulated_comm) --model "$$MK_MODEL" \
	      $(emulated_window)) || exit; \
	  fi; \
	  $(PY) -m bench matrix $(emulated_cells) --repeats 1 -- --steps "$$steps" \
	    --comm-probe-steps "$$steps" $(emulated_train) $(matrix_failed); \
	done; [ "$$failed" = 0 ] || exit 1
	$(emulated_steady) || echo "bench-emulated: warning: bench steadiness after the rounds failed on a CPU (its row in $(emulated_steadiness) says why); the prediction reads the rows that ran" >&2
	$(PY) -m bench table "$$MK_RESULTS" --group-by model,batch,comm_hook
	set -o pipefail; steady=(); \
	[ "$$MK_STEADY_S" = 0 ] || steady=(--steadiness $(emulated_steadiness)); \
	$(PY) -m bench predict "$$MK_RESULTS" --link-from $(emulated_comm) --nodes 2,4 \
	  "$${steady[@]}" | tee "$${MK_RESULTS%.jsonl}-prediction.txt"
	$(PY) -m bench report "$$MK_RESULTS" --prediction "$${MK_RESULTS%.jsonl}-prediction.txt"
	$(PY) -m bench plot $(emulated_comm)

bench-predict: LINK ?= 5gbit
bench-predict: NODES ?= 2,4
bench-predict: venv ## predict N nodes from the 1-node runs in RESULTS over LINK (5gbit; LINK_FROM=sweep measured on your link)
	@$(call pick_results,-comm\.jsonl$$\|/comm-); \
	$(PY) -m bench predict "$$results" --link "$$MK_LINK" \
	  $${MK_LINK_FROM:+--link-from "$$MK_LINK_FROM"} --nodes "$$MK_NODES"

# The prediction against measurements on 2, 3 and 4 emulated nodes, every comm hook, at
# each of LINKS: the deep & wide MLP at batch 16, communication-bound (see the script).
bench-accuracy: LINKS ?= 1gbit,5gbit
bench-accuracy: NODES ?= 2,3,4
bench-accuracy: COMM_HOOKS ?= none,fp16,bf16,powersgd
bench-accuracy: RESULTS ?= results/accuracy-$(RUN_TAG)
bench-accuracy: venv ## measured vs predicted on NODES (2,3,4) emulated nodes at LINKS (1gbit,5gbit), every comm hook, each cell at least MIN_TIMED_S (15) seconds, the 1-node cells bracketing the N-node ones, the CPUs' own drift for STEADY_S (30) s before and after; root, over an hour
	$(PY) scripts/prediction_accuracy.py --links "$$MK_LINKS" --nodes "$$MK_NODES" \
	  --hooks "$$MK_COMM_HOOKS" --repeats "$$MK_REPEATS" --out "$$MK_RESULTS" \
	  $${MK_MIN_TIMED_S:+--min-timed-s "$$MK_MIN_TIMED_S"} \
	  $${MK_STEADY_S:+--steady-s "$$MK_STEADY_S"}

# The grid of issue 29: workloads unlike the reference, from compute-bound to link-bound,
# each on the links and hooks its line names (GRID: scripts/accuracy-grid.tsv), into
# RESULTS/NAME, then every cell in RESULTS/grid.md, the held-out ones counted apart.
bench-accuracy-grid: GRID ?= scripts/accuracy-grid.tsv
bench-accuracy-grid: NODES ?= 2
bench-accuracy-grid: RESULTS ?= results/accuracy-grid-$(RUN_TAG)
bench-accuracy-grid: venv ## measured vs predicted on every workload of GRID (scripts/accuracy-grid.tsv; WORKLOADS=a,b for some), NODES (2) emulated nodes, REPEATS, each cell at least MIN_TIMED_S (15) seconds, the 1-node cells bracketing the N-node ones, the CPUs' own drift for STEADY_S (30) s before and after each workload; root, about 3.5 h at 3 REPEATS on 2 CPUs
	$(PY) scripts/prediction_accuracy.py --grid "$$MK_GRID" --nodes "$$MK_NODES" \
	  --repeats "$$MK_REPEATS" --out "$$MK_RESULTS" $${MK_WORKLOADS:+--workloads "$$MK_WORKLOADS"} \
	  $${MK_MIN_TIMED_S:+--min-timed-s "$$MK_MIN_TIMED_S"} \
	  $${MK_STEADY_S:+--steady-s "$$MK_STEADY_S"}

# Straggler detection (issue 26): the same 4-host job clean, and with host 2 slowed by a
# CPU quota (25%, 10%) or its link at a tenth, interleaved; what each record named, tallied
# (the script checks every setting and names the bad one).
bench-straggler: LINK ?= 1gbit
bench-straggler: MODEL ?= mlp
bench-straggler: STEPS ?= 30
bench-straggler: N_CLEAN ?= 20
bench-straggler: N_SLOW ?= 10
bench-straggler: RESULTS ?= results/straggler-$(RUN_TAG)
bench-straggler: venv ## is the slow host named? 4 emulated hosts: clean x N_CLEAN (20), host 2 slowed (CPU 25%, 10%, link /10) x N_SLOW (10) each; root
	$(PY) scripts/straggler_detection.py --link "$$MK_LINK" --model "$$MK_MODEL" \
	  --steps "$$MK_STEPS" --n-clean "$$MK_N_CLEAN" --n-slow "$$MK_N_SLOW" --out "$$MK_RESULTS"

# After bench-emulated's own default (2): a target's `?=` applies only where the variable is
# not defined yet when make reads it.
REPEATS ?= 3

bench-overhead: venv ## trainer vs a plain loop on CPU: 1 process (bare, no DDP) and 2 (DDP); goal >= 0.98
	$(PY) scripts/overhead.py --against plain --repeats "$$MK_REPEATS" --nproc 1
	$(PY) scripts/overhead.py --against plain --repeats "$$MK_REPEATS" --nproc 2

bench-launch-overhead: venv build-cpu ## per-cell overhead against the torchrun floor, with its breakdown: native (goal: floor + 1 s), Compose, Slurm (test cluster; floor + 2 s)
	$(PY) scripts/launch_overhead.py --repeats "$$MK_REPEATS" --image "$$MK_CPU_IMAGE"

bench-container-overhead: venv build-cpu ## the trainer natively vs in the CPU container (goal >= 0.98)
	$(PY) scripts/overhead.py --against container --image "$$MK_CPU_IMAGE" --repeats "$$MK_REPEATS"

# --- quality -------------------------------------------------------------------------------
lint: venv ## static checks: ruff, the architecture contracts (lint-imports: no torch on the host side, no cycles), the types (mypy)
	"$$MK_VENV/bin/ruff" check bench tests scripts
	"$$MK_VENV/bin/lint-imports" --no-cache
	"$$MK_VENV/bin/mypy"

unit: venv ## the fast unit tests only (no Docker)
	$(PY) -m pytest -m "not e2e"

# What the tests need on a Debian/Ubuntu host, installed where missing, with one apt-get
# update: the NFS client (libnfs-utils), sshd for the SSH tests' own loopback server
# (openssh-server; its system service is not started), ip/tc (iproute2), Docker and
# Compose, Python's venv module, and Fashion-MNIST where FASHION_MNIST_DIR is missing.
test-deps: ## install the test prerequisites missing on this host (scripts/install-host.sh test)
	@parts=(test docker); \
	"$$MK_PYTHON" -c 'import ensurepip, venv' 2>/dev/null || parts+=(venv); \
	[ -d "$$MK_FASHION_MNIST_DIR" ] || parts+=(dataset); \
	scripts/install-host.sh "$${parts[@]}"

# Two phases (tests/conftest.py, PHASES): the tests that can share the machine on two
# pytest-xdist workers, those of one shared resource (an xdist_group) on one worker in turn;
# then the serial ones (rates, CPU quotas, emulated links, the bench-* containers, the
# Slurm clusters), alone. The second runs whatever
# the first gave, and either failing fails the target. PYTEST_ADDOPTS reaches both; a phase
# it leaves without a test (exit 5) is no failure unless both are.
test: test-deps venv lint docker build-cpu build-nfs ## every test: unit and end-to-end (Docker, NFS, torchrun, sshd)
	export BENCH_FASHION_MNIST_DIR="$$MK_FASHION_MNIST_DIR"; \
	$(PY) -m pytest --phase parallel -n 2 --dist loadgroup; parallel=$$?; \
	$(PY) -m pytest --phase serial; serial=$$?; \
	echo "test: parallel phase exit $$parallel, serial phase exit $$serial"; \
	if [ $$parallel = 5 ] && [ $$serial = 5 ]; then exit 5; fi; \
	for rc in $$parallel $$serial; do [ $$rc = 0 ] || [ $$rc = 5 ] || exit $$rc; done

# Only a virtual environment (it has a pyvenv.cfg) is removed as VENV.
clean: ## remove the venv, build files and caches (results and images are kept)
	@if [ -e "$$MK_VENV" ] && [ ! -f "$$MK_VENV/pyvenv.cfg" ]; then \
	  echo "clean: VENV=$$MK_VENV is not a virtual environment (no pyvenv.cfg): not removing it" >&2; exit 2; fi
	rm -rf -- $${MK_VENV:+"$$MK_VENV"} .pytest_cache build *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
