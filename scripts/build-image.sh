#!/usr/bin/env bash
# Build one of the stack's images, offline-capable.
#
#   scripts/build-image.sh trainer TAG BASE_IMAGE BASE_PYTHON [TORCH_FLAVOUR]
#   scripts/build-image.sh nfs     TAG BASE_IMAGE
#
# The base image is used if present locally or pullable; where no registry answers, a
# local Debian base (LOCAL_BASE_IMAGE, Python LOCAL_BASE_PYTHON; docker/images.env) is
# built with scripts/make-base-image.sh instead, and this says so. Trainer wheels for the
# base's Python are downloaded on the host first (scripts/download-wheels.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(dirname "$here")
# shellcheck source=../docker/images.env
. "$repo/docker/images.env"
say() { printf 'build-image: %s\n' "$*" >&2; }
kind=${1:-}; tag=${2:-}; base=${3:-}; pyver=${4:-}; flavour=${5:-default}
# Every argument is checked before docker sees it: an image reference never starts with
# "-" (docker would read an option), a Python version is 3.N, a flavour a plain word.
bad() { say "error: $1=${2@Q}: $3"; exit 2; }
image_ref='^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$'
[[ $tag =~ $image_ref ]] || bad TAG "$tag" "an image reference such as bench-trainer:cpu"
[[ $base =~ $image_ref ]] || bad BASE_IMAGE "$base" "an image reference such as debian:bookworm-slim"
[ "$kind" != trainer ] || [[ $pyver =~ ^3\.[0-9]{1,2}$ ]] || bad BASE_PYTHON "$pyver" "a version such as 3.11"
[[ $flavour =~ ^[a-z0-9][a-z0-9.]{0,31}$ ]] || bad TORCH_FLAVOUR "$flavour" "default, or a PyTorch index name such as cu126 or cpu (docker/cuda-flavours.tsv)"

if docker image inspect "$base" >/dev/null 2>&1; then
  :
elif docker pull -q "$base" >/dev/null 2>&1; then
  say "pulled $base"
else
  say "cannot pull $base (no registry reachable): building on the local base $LOCAL_BASE_IMAGE instead"
  "$here/make-base-image.sh" "$LOCAL_BASE_IMAGE"
  base=$LOCAL_BASE_IMAGE; pyver=$LOCAL_BASE_PYTHON
fi

commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo 1 || echo 0)
# The uncommitted change's sha256, as bench.provenance.diff_sha256 computes it (the same
# command): two dirty trees of one commit are told apart in the records.
diff_sha256=
if [ "$dirty" = 1 ]; then
  diff_sha256=$(timeout 10 git -C "$repo" diff HEAD --binary --no-color --no-ext-diff --no-textconv \
                  2>/dev/null | sha256sum | cut -c1-64) || diff_sha256=
fi
args=(--network host --build-arg "BASE_IMAGE=$base")
case "$kind" in
  trainer)
    wheels=".wheels/py$pyver-$flavour"
    # Downloaded for these pins and this flavour, or downloaded (again).
    wanted="$(sha256sum "$repo/requirements.txt" | cut -d' ' -f1) $flavour"
    [ "$(cat "$repo/$wheels/.complete" 2>/dev/null)" = "$wanted" ] ||
      "$here/download-wheels.sh" "$repo/$wheels" "$pyver" "$flavour"
    args+=(-f docker/Dockerfile --build-arg "WHEELS=$wheels" --build-arg "GIT_COMMIT=$commit"
           --build-arg "GIT_DIRTY=$dirty" --build-arg "GIT_DIFF_SHA256=$diff_sha256"
           --build-arg "TORCH_FLAVOUR=$flavour"
           --build-arg "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)") ;;
  nfs) args+=(-f nfs/Dockerfile) ;;
  *) say "error: unknown image kind '$kind': trainer or nfs"; exit 2 ;;
esac
# What the image is made of: the files the Dockerfile copies, the base, the flavour and the
# commit. An image of this tag built from the same inputs is reused as it is: the legacy
# builder would otherwise send the whole context (gigabytes of wheels) again to rebuild
# the same thing.
case "$kind" in trainer) inputs=(docker/Dockerfile docker/node-entrypoint.sh requirements.txt bench "$wheels/.complete") ;;
                nfs) inputs=(nfs/Dockerfile nfs/entrypoint.sh) ;; esac
digest=$( { printf '%s\n' "$kind" "$base" "$pyver" "$flavour" "$commit" "$dirty" "$diff_sha256"
            (cd "$repo" && find "${inputs[@]}" -type f -not -path '*/__pycache__/*' -print0 \
               | sort -z | xargs -0 sha256sum); } | sha256sum | cut -c1-32)
if [ "$(docker image inspect -f '{{index .Config.Labels "io.bench.inputs"}}' "$tag" 2>/dev/null)" = "$digest" ]; then
  say "$tag is up to date (same inputs: $digest)"
  exit 0
fi
args+=(--label "io.bench.inputs=$digest")
# A first trainer build holds the wheels up to three times under Docker's root (the sent
# context, their layer, the venv installed from them) and the venv once more in the final
# stage: say so before a build that would stop half-way with "no space left on device".
docker_root=$(docker info -f '{{.DockerRootDir}}' 2>/dev/null || echo /var/lib/docker)
free_kib=$(df -Pk "$docker_root" 2>/dev/null | awk 'NR == 2 {print $4}')
if [ "$kind" = trainer ] && [[ $free_kib =~ ^[0-9]+$ ]]; then
  wheels_kib=$(du -sk "$repo/$wheels" | cut -f1)
  if (( free_kib < 5 * wheels_kib )); then
    say "warning: $(( free_kib / 1048576 )) GiB free under $docker_root; a first build of $tag may need up to $(( 5 * wheels_kib / 1048576 )) GiB (five times the wheels). Untagged images (replaced builds, the build stage's cache) are listed by \`docker images -f dangling=true\` and removed by \`docker image prune\`; the next build then installs the wheels again."
  fi
fi
old_id=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
say "building $tag from $base (the first build takes a few minutes)"
start=$(date +%s)
# The legacy builder (no BuildKit here) prints every step; keep its log for failures.
log=$(mktemp /tmp/bench-build.XXXXXX.log)
if ! (cd "$repo" && DOCKER_BUILDKIT=0 docker build "${args[@]}" -t "$tag" .) >"$log" 2>&1; then
  say "error: docker build of $tag failed; last lines of $log:"; tail -n 20 "$log" >&2
  if grep -q 'no space left on device' "$log"; then
    say "fix: free space under $docker_root (\`docker image prune\` removes untagged images; \`docker system df\` shows what is held) and run the build again"
  fi
  exit 1
fi
rm -f "$log"
new_id=$(docker image inspect -f '{{.Id}}' "$tag")
say "built $tag (${new_id:0:19}) in $(( $(date +%s) - start )) s"
# The image this one replaces is untagged now; each rebuild would otherwise keep one more
# (gigabytes where the wheels changed). One a container still uses stays, and says why.
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ] &&
   [ -z "$(docker image inspect -f '{{join .RepoTags ","}}' "$old_id" 2>/dev/null)" ]; then
  if docker rmi "$old_id" >/dev/null 2>&1; then
    say "removed the image it replaces (${old_id:0:19})"
  else
    say "kept the image it replaces (${old_id:0:19}): a container still uses it"
  fi
fi
