#!/usr/bin/env bash
# Fail fast, naming the missing piece, when Docker cannot give containers an NVIDIA GPU that
# the image's torch can use. Prints the number of GPUs on success.
#
#   scripts/check-gpu.sh [TORCH_FLAVOUR]      (default: default)
#
# The driver must be at least the flavour's minimum (docker/cuda-flavours.tsv): below it the
# container refuses to start (cuda>=13.0) or torch starts without CUDA. On failure it names
# the flavour this driver does run, as the exact build line.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
table=$here/../docker/cuda-flavours.tsv
flavour=${1:-default}
fail() {
  printf 'check-gpu: %s\n' "$1" >&2
  printf 'check-gpu: on a machine without NVIDIA GPUs, run the CPU profile instead: make bench-cpu\n' >&2
  exit 1
}
[[ $flavour =~ ^[a-z0-9][a-z0-9.]{0,31}$ ]] || { echo "check-gpu: TORCH_FLAVOUR=$flavour: use default, cu130 or cu126" >&2; exit 2; }
row=$(awk -F'\t' -v f="$flavour" '$1 == f' "$table")
[ -n "$row" ] || { echo "check-gpu: TORCH_FLAVOUR=$flavour: not in docker/cuda-flavours.tsv: use default, cu130 or cu126" >&2; exit 2; }
IFS=$'\t' read -r _ cuda minimum _ <<< "$row"

command -v nvidia-smi >/dev/null 2>&1 ||
  fail "no NVIDIA driver on this host (nvidia-smi not found): install driver $minimum or newer (docker/cuda-flavours.tsv lists the minimum per flavour)"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') || true
[ "${gpus:-0}" -gt 0 ] || fail "nvidia-smi finds no GPU: check the driver with nvidia-smi"
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' ')
major=${driver%%.*}
[[ $major =~ ^[0-9]+$ ]] || fail "nvidia-smi reports no driver version ('$driver'): check the driver with nvidia-smi"
if [ "$major" -lt "$minimum" ]; then
  # The newest CUDA line this driver runs, from the same table.
  works=$(awk -F'\t' -v d="$major" '!/^#/ && NF >= 4 && $3 <= d && $1 != "default" {print $2 "\t" $1}' "$table" \
    | sort -t. -k1,1n -k2,2n | tail -n 1 | cut -f2)
  if [ -n "$works" ]; then
    fail "driver $driver is older than $minimum, the minimum for TORCH_FLAVOUR=$flavour (CUDA $cuda). Update the driver, or build for this one: make build TORCH_FLAVOUR=$works (then pass TORCH_FLAVOUR=$works to the bench targets too)"
  fi
  fail "driver $driver is older than every flavour's minimum (docker/cuda-flavours.tsv): update the driver to $minimum or newer"
fi
docker info >/dev/null 2>&1 || fail "the Docker daemon does not answer: scripts/ensure-docker.sh starts it"
if ! docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q nvidia && ! command -v nvidia-ctk >/dev/null; then
  fail "Docker has no NVIDIA runtime: install nvidia-container-toolkit (scripts/install-host.sh gpu), then restart the Docker daemon"
fi
echo "$gpus"
