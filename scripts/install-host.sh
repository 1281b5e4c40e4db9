#!/usr/bin/env bash
# Install what this stack needs on a Debian/Ubuntu host, and say what was done.
#
#   scripts/install-host.sh [PART...]     PART: docker dataset base-image-tools gpu test venv
#                                         (default: docker dataset base-image-tools, plus gpu
#                                         where nvidia-smi works)
#
# docker            Docker engine and Compose from the distribution (docker.io, docker-compose)
# dataset           Debian's dataset-fashion-mnist (the real idx files, for the CPU profile)
# base-image-tools  debootstrap, to build a base image where no registry can be reached
# gpu               nvidia-container-toolkit, so containers see the host's GPUs
# test              what `make test` needs besides those: libnfs-utils (a userspace NFS
#                   client), openssh-server (the SSH tests start their own sshd on 127.0.0.2
#                   and 127.0.0.3; the system's ssh service is neither started nor enabled
#                   by this install), iproute2 (ip netns, tc), procps (pgrep) and chromium
#                   (the report page is opened in a real headless browser)
# venv              python3-venv, for `python3 -m venv`
#
# Uses sudo when not run as root. Installs only what is missing, with one apt-get update
# (none where the package lists are less than an hour old and hold what is asked for).
set -euo pipefail

say() { printf 'install-host: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || die "not root and no sudo: run this script as root"
  SUDO="sudo"
fi
command -v apt-get >/dev/null || die "only Debian/Ubuntu (apt-get) hosts are supported; install Docker, Compose and debootstrap by hand"

# Installed, not merely known to dpkg (a removed package keeps a status entry).
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

updated=""
apt_update() {
  [ -z "$updated" ] || return 0
  say "apt-get update"
  $SUDO apt-get update -qq
  updated=1
}
# Package lists younger than an hour that know every package asked for: no update needed.
lists_fresh() {
  find /var/lib/apt/lists -maxdepth 1 -type f -name '*_Packages*' -mmin -60 2>/dev/null | grep -q . \
    && apt-cache show "$@" >/dev/null 2>&1
}
apt_install() {
  local missing=()
  for pkg in "$@"; do
    installed "$pkg" || missing+=("$pkg")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "already installed: $*"
    return
  fi
  lists_fresh "${missing[@]}" || apt_update
  say "installing: ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# The test packages. openssh-server would start (and, under systemd, enable) a system sshd
# listening on every interface: a policy-rc.d that refuses service starts is in place while
# it installs, and the unit is disabled after. The tests run their own sshd on loopback.
POLICY_RC=/usr/sbin/policy-rc.d
install_test() {
  # prometheus and its pushgateway: the acceptance export's tests start their own, on
  # loopback; like sshd, the packages' own services must not start.
  local pkgs=(libnfs-utils openssh-server openssh-client iproute2 procps chromium prometheus
              prometheus-pushgateway)
  local services=(openssh-server prometheus prometheus-pushgateway) missing=0 pkg
  for pkg in "${services[@]}"; do installed "$pkg" || missing=1; done
  if [ "$missing" = 0 ] || [ -e "$POLICY_RC" ]; then
    apt_install "${pkgs[@]}"
    return
  fi
  trap '$SUDO rm -f "$POLICY_RC"' EXIT
  printf '#!/bin/sh\n# scripts/install-host.sh test: no service starts while it installs\nexit 101\n' \
    | $SUDO tee "$POLICY_RC" >/dev/null
  $SUDO chmod 755 "$POLICY_RC"
  apt_install "${pkgs[@]}"
  $SUDO rm -f "$POLICY_RC"
  trap - EXIT
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    $SUDO systemctl disable --quiet ssh.service prometheus.service \
      prometheus-pushgateway.service 2>/dev/null || true
  fi
  say "openssh-server, prometheus and its pushgateway are installed for the tests' own" \
    "servers; their system services were not started"
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
    test) install_test ;;
    venv) apt_install python3-venv ;;
    *) die "unknown part '$part': choose from docker dataset base-image-tools gpu test venv" ;;
  esac
done
say "done: ${parts[*]}"
