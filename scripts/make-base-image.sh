#!/usr/bin/env bash
# Build a Debian base image locally, for sites where no registry can be reached:
# debootstrap a minimal bookworm with Python, then `docker import` it.
#
#   scripts/make-base-image.sh [IMAGE]        (default: bench-base:bookworm)
#
# DEBIAN_MIRROR picks the mirror (default: the host's own apt mirror, else deb.debian.org).
set -euo pipefail
IMAGE=${1:-bench-base:bookworm}
SUITE=${SUITE:-bookworm}
say() { printf 'make-base-image: %s\n' "$*" >&2; }
if ! [[ $IMAGE =~ ^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$ ]]; then
  say "error: IMAGE=${IMAGE@Q}: an image reference such as bench-base:bookworm"; exit 2
fi
if ! [[ $SUITE =~ ^[a-z][a-z0-9-]{0,31}$ ]]; then
  say "error: SUITE=${SUITE@Q}: a Debian suite such as bookworm"; exit 2
fi

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  say "$IMAGE exists already"; exit 0
fi
host_mirror() {
  # The first plain Debian archive URI in the host's apt sources: it is known to answer.
  grep -hoE '(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list \
    /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
    | awk '{print $2}' | head -n 1 || true
}
MIRROR=${DEBIAN_MIRROR:-$(host_mirror)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null || "$(dirname "$0")/install-host.sh" base-image-tools

root=$(mktemp -d /tmp/bench-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
say "debootstrap $SUITE from $MIRROR (about a minute)"
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
  "$SUITE" "$root" "$MIRROR" >/tmp/bench-debootstrap.log 2>&1 || {
  say "error: debootstrap failed; last lines of /tmp/bench-debootstrap.log:"; tail -n 5 /tmp/bench-debootstrap.log >&2; exit 1; }
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
say "importing as $IMAGE"
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
say "built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
