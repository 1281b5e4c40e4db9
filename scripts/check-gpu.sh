#!/usr/bin/env bash
# Fail fast, naming the missing piece, when Docker cannot give containers an NVIDIA GPU that
# the image's torch can use. Prints the number of GPUs on success.
#
#   scripts/check-gpu.sh [TORCH_FLAVOUR]      (default: default)
#
# The driver must be at least the flavour's minimum (docker/cuda-flavours.tsv): below it the
# container refuses to start (cuda>=13.0) or torch starts without CUDA. On failure it names
# the flavour this driver does run, as the exact build line.
#
# On an NVSwitch system (HGX/DGX A100, H100) CUDA starts on no GPU until the
# nvidia-fabricmanager service has trained the fabric: any GPU whose fabric state is not
# Completed (or N/A: no NVSwitch), or whose status is not Success, fails in one line naming
# Fabric Manager, the GPU and the fix. Read from nvidia-smi --query-gpu=fabric.state,
# fabric.status, or, where the driver rejects those fields, from nvidia-smi -q; a driver
# that reports neither is not judged. bench/nvidia_smi.py reads the same and says the same.
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
# Whether a fabric state (status) lets CUDA start: $2 (Completed, Success), or no NVSwitch.
fabric_ok() { case "$1" in "$2"|N/A|"[N/A]"|"Not Supported"|"[Not Supported]") return 0;; esac; return 1; }
fabric=$(nvidia-smi --query-gpu=index,driver_version,fabric.state,fabric.status --format=csv,noheader 2>&1)
if [ $? -ne 0 ] || [[ $fabric == *"is not a valid field to query"* ]]; then
  # nvidia-smi -q: GPUs in index order, each one's Fabric section four spaces in, its State
  # and Status eight; printed as the query prints them, or nothing where a GPU has none.
  fabric=$(nvidia-smi -q 2>/dev/null | awk '
    /^Driver Version *: / { driver = $NF }
    /^GPU [0-9A-Fa-f]+:/ { gpus++; section = "" }
    /^    [A-Za-z][A-Za-z0-9 ]*$/ { section = substr($0, 5) }
    section == "Fabric" && /^        (State|Status) *: / {
      value = $0; sub(/^[^:]*: /, "", value); sub(/ +$/, "", value); got[gpus - 1, $1] = value }
    END { for (i = 0; i < gpus; i++) if (!((i, "State") in got && (i, "Status") in got)) exit
          for (i = 0; i < gpus; i++) print i ", " driver ", " got[i, "State"] ", " got[i, "Status"] }')
fi
# Each line matched whole; one that is not leaves the fabric unjudged.
word='\[?[A-Za-z][A-Za-z0-9 _/.()-]{0,63}\]?'
line_re="^([0-9]{1,3}), ([0-9]{2,4}(\.[0-9]{1,4}){1,3}), ($word), ($word)\$"
held=0 first=""
while IFS= read -r line; do
  [ -n "$line" ] || continue
  [[ $line =~ $line_re ]] || { held=0; break; }
  index=${BASH_REMATCH[1]} fm_driver=${BASH_REMATCH[2]} state=${BASH_REMATCH[4]} status=${BASH_REMATCH[5]}
  if ! fabric_ok "$state" Completed || ! fabric_ok "$status" Success; then
    held=$((held + 1))
    [ -n "$first" ] || first="GPU $index|$state|$status|$fm_driver"
  fi
done <<< "$fabric"
if [ "$held" -gt 0 ]; then
  IFS='|' read -r gpu state status fm_driver <<< "$first"
  more=""; [ "$held" -gt 1 ] && more=" (and $((held - 1)) more)"
  # One line, without fail()'s CPU-profile hint: this host has GPUs, held back.
  printf 'check-gpu: %s\n' "Fabric Manager: $gpu$more reports NVSwitch fabric state $state, status $status: CUDA starts on no GPU of this system until the fabric is trained: sudo systemctl start nvidia-fabricmanager (the nvidia-fabricmanager package must match the driver's version, $fm_driver)" >&2
  exit 1
fi
docker info >/dev/null 2>&1 || fail "the Docker daemon does not answer: scripts/ensure-docker.sh starts it"
if ! docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q nvidia && ! command -v nvidia-ctk >/dev/null; then
  fail "Docker has no NVIDIA runtime: install nvidia-container-toolkit (scripts/install-host.sh gpu), then restart the Docker daemon"
fi
echo "$gpus"
