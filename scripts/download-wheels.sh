#!/usr/bin/env bash
# Fill a wheel directory for the image build, on the host: the host's pip configuration
# (a mirror, a proxy) then serves the build too, which has no network of its own.
#
#   scripts/download-wheels.sh DIR PYTHON_VERSION [TORCH_FLAVOUR]
#
# PYTHON_VERSION is the image's Python (3.11 for Debian bookworm, 3.12 for Ubuntu 24.04).
# TORCH_FLAVOUR: a flavour of docker/cuda-flavours.tsv (default: PyPI's build, CUDA 13.0
# for torch 2.14; cu126 for older drivers), or cpu.
#
# pip is the project venv's (`make venv` creates it, installing python3-venv where it is
# missing): a fresh server image often has no pip for its system python3.
set -euo pipefail
DIR=${1:-}; PYVER=${2:-}; FLAVOUR=${3:-default}
here=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$here/.venv/bin/python}
say() { printf 'wheels: %s\n' "$*" >&2; }
# Checked before pip sees them: FLAVOUR goes into an index URL, PYVER into --python-version.
bad() { say "error: $1=${2@Q}: $3"; exit 2; }
[ -n "$DIR" ] && [ "${DIR#-}" = "$DIR" ] || bad DIR "$DIR" "a directory for the wheels, e.g. .wheels/py3.11-default"
[[ $PYVER =~ ^3\.[0-9]{1,2}$ ]] || bad PYTHON_VERSION "$PYVER" "a version such as 3.11"
flavours=$(awk -F'\t' '!/^#/ && NF >= 4 {printf "%s ", $1}' "$here/docker/cuda-flavours.tsv")
case " $flavours cpu " in *" $FLAVOUR "*) ;; *) bad TORCH_FLAVOUR "$FLAVOUR" "one of: ${flavours}cpu (docker/cuda-flavours.tsv)";; esac
[ -x "$PYTHON" ] || bad PYTHON "$PYTHON" "no such interpreter: run \`make venv\` first (it brings its own pip)"

args=(download --quiet --disable-pip-version-check -d "$DIR" -r "$here/requirements.txt" --only-binary=:all:)
if [ "$FLAVOUR" != default ]; then
  args+=(--extra-index-url "https://download.pytorch.org/whl/$FLAVOUR")
fi
host_pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$host_pyver" != "$PYVER" ]; then
  # Cross-download: name the target interpreter and every manylinux tag the wheels use.
  args+=(--python-version "$PYVER" --implementation cp --platform manylinux1_x86_64
         --platform manylinux2010_x86_64 --platform manylinux2014_x86_64)
  for n in 5 12 17 18 24 25 27 28 31 34 35; do args+=(--platform "manylinux_2_${n}_x86_64"); done
fi
mkdir -p "$DIR"
say "downloading the pinned requirements for Python $PYVER ($FLAVOUR torch) into $DIR"
"$PYTHON" -m pip "${args[@]}" 2> >(grep -v '^WARNING: Location' >&2)
# The marker holds what the wheels were downloaded for: a changed pin list or flavour
# downloads again (build-image.sh compares it).
sha256sum "$here/requirements.txt" | cut -d' ' -f1 | sed "s/\$/ $FLAVOUR/" > "$DIR/.complete"
say "$(ls "$DIR" | grep -c '\.whl$') wheels, $(du -sh "$DIR" | cut -f1)"
