#!/usr/bin/env bash
# Make sure a Docker engine and Compose (v1 and v2) are installed and the daemon answers; say
# what was done.
# Installs through scripts/install-host.sh when missing. Starts the daemon when it is not
# running: through systemd where it runs, else dockerd in the background with DOCKERD_FLAGS
# (host networking is all this stack uses, so no bridge or iptables rules are needed).
set -euo pipefail
DOCKERD_FLAGS=${DOCKERD_FLAGS:---bridge=none --iptables=false --ip-masq=false}
DOCKERD_LOG=${DOCKERD_LOG:-/tmp/bench-dockerd.log}
DOCKER_PIDFILE=${DOCKER_PIDFILE:-/var/run/docker.pid}
here=$(cd "$(dirname "$0")" && pwd)
say() { printf 'ensure-docker: %s\n' "$*" >&2; }
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

if ! command -v dockerd >/dev/null || ! { command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1; }; then
  say "Docker engine or Compose is missing: installing them with scripts/install-host.sh docker"
  "$here/install-host.sh" docker
fi

# Compose v2 (`docker compose`), beside Debian's v1 where that is what the distribution has.
"$here/install-compose-v2.sh"

if docker info >/dev/null 2>&1; then exit 0; fi

if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  say "the Docker daemon is not running: starting it with systemctl"
  $SUDO systemctl start docker || true
fi
if ! docker info >/dev/null 2>&1 && ! pgrep -x dockerd >/dev/null; then
  # No dockerd runs, so a pid file is a dead daemon's (a restarted machine or container
  # keeps /var/run): dockerd refuses to start while its number names any process, and
  # after a restart another process often has it.
  if [ -e "$DOCKER_PIDFILE" ]; then
    say "removing $DOCKER_PIDFILE, left by a Docker daemon that is no longer running (pid $(head -c 20 "$DOCKER_PIDFILE" 2>/dev/null | tr -cd '0-9'))"
    $SUDO rm -f -- "$DOCKER_PIDFILE"
  fi
  say "the Docker daemon is not running: starting dockerd $DOCKERD_FLAGS (log: $DOCKERD_LOG)"
  # setsid: the daemon outlives this script and the make that called it.
  $SUDO setsid dockerd $DOCKERD_FLAGS --pidfile "$DOCKER_PIDFILE" >"$DOCKERD_LOG" 2>&1 < /dev/null &
fi
for _ in $(seq 60); do
  if docker info >/dev/null 2>&1; then say "the Docker daemon answers"; exit 0; fi
  sleep 1
done
say "error: the Docker daemon did not answer within 60 s; see $DOCKERD_LOG"
tail -n 5 "$DOCKERD_LOG" >&2 2>/dev/null || true
exit 1
