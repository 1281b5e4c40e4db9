#!/usr/bin/env bash
# Install what this stack needs on a Debian/Ubuntu host, and say what was done.
#
#   scripts/install-host.sh [PART...]     PART: docker dataset base-image-tools gpu (default: all
#                                         but gpu, plus gpu where nvidia-smi works)
#
# docker            Docker engine and Compose from the distribution (docker.io, docker-compose)
# dataset           Debian's dataset-fashion-mnist (the real idx files, for the CPU profile)
# base-image-tools  debootstrap, to build a base image where no registry can be reached
# gpu               nvidia-container-toolkit, so containers see the host's GPUs
#
# Uses sudo when not run as root. Installs only what is missing.
set -euo pipefail

say() { printf 'install-host: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || die "not root and no sudo: run this script as root"
  SUDO="sudo"
fi
command -v apt-get >/dev/null || die "only Debian/Ubuntu (apt-get) hosts are supported; install Docker, Compose and debootstrap by hand"

updated=""
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "already installed: $*"
    return
  fi
  if [ -z "$updated" ]; then $SUDO apt-get update -qq; updated=1; fi
  say "installing: ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

install_docker() {
  if command -v dockerd >/dev/null && { command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1; }; then
    say "Docker engine and Compose are present"
  else
    apt_install docker.io docker-compose
  fi
}

install_gpu() {
  if dpkg -s nvidia-container-toolkit >/dev/null 2>&1; then
    say "nvidia-container-toolkit is present"
  elif apt-cache show nvidia-container-toolkit >/dev/null 2>&1; then
    apt_install nvidia-container-toolkit
  else
    die "nvidia-container-toolkit is not in this host's apt sources. Add NVIDIA's repository
  (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html),
  then run: scripts/install-host.sh gpu"
  fi
  if command -v nvidia-ctk >/dev/null; then
    $SUDO nvidia-ctk runtime configure --runtime=docker >/dev/null
    say "configured Docker's nvidia runtime; restart the Docker daemon to use it"
  fi
}

parts=("$@")
if [ ${#parts[@]} -eq 0 ]; then
  parts=(docker dataset base-image-tools)
  if command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then parts+=(gpu); fi
fi
for part in "${parts[@]}"; do
  case "$part" in
    docker) install_docker ;;
    dataset) apt_install dataset-fashion-mnist ;;
    base-image-tools) apt_install debootstrap ;;
    gpu) install_gpu ;;
    *) die "unknown part '$part': choose from docker dataset base-image-tools gpu" ;;
  esac
done
say "done: ${parts[*]}"
