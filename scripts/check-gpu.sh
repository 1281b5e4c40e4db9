#!/usr/bin/env bash
# Fail fast, naming the missing piece, when Docker cannot give containers an NVIDIA GPU.
# Prints the number of GPUs on success.
set -uo pipefail
fail() {
  printf 'check-gpu: %s\n' "$1" >&2
  printf 'check-gpu: on a machine without NVIDIA GPUs, run the CPU profile instead: make bench-cpu\n' >&2
  exit 1
}
command -v nvidia-smi >/dev/null 2>&1 ||
  fail "no NVIDIA driver on this host (nvidia-smi not found): install the driver for your GPU (docker/README.md lists the minimum per CUDA flavour)"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') || true
[ "${gpus:-0}" -gt 0 ] || fail "nvidia-smi finds no GPU: check the driver with nvidia-smi"
docker info >/dev/null 2>&1 || fail "the Docker daemon does not answer: scripts/ensure-docker.sh starts it"
if ! docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q nvidia && ! command -v nvidia-ctk >/dev/null; then
  fail "Docker has no NVIDIA runtime: install nvidia-container-toolkit (scripts/install-host.sh gpu), then restart the Docker daemon"
fi
echo "$gpus"
