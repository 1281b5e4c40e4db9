#!/usr/bin/env bash
# Reference figures on one GPU, natively (no container), in one go:
#  1. the trainer against a bare bf16 channels-last ResNet-50 loop (scripts/plain_ddp_loop.py)
#     on the same GPU, alternated so drift hits both alike;
#  2. the trainer through `bench matrix --launcher native` (the per-node GPU assignment);
#  3. real data (Fashion-MNIST-shaped idx files made here) prepared on the device;
#  4. `bench allreduce` with NCCL;
#  5. --compile, and what NVML says (for GPU telemetry).
# Usage: scripts/gpu-reference.sh OUTDIR   (PYTHON=python3, BATCH=256, COMPILE=1 by default)
# Every step runs even when one before it failed; each writes its log under OUTDIR.
set -uo pipefail
out=${1:?usage: scripts/gpu-reference.sh OUTDIR}
py=${PYTHON:-python3}
batch=${BATCH:-256}
mkdir -p "$out"
cd "$(dirname "$0")/.."

step() {  # step NAME CMD...: run, log, keep going
  local name=$1; shift
  echo "== $name: $*" | tee -a "$out/steps.log"
  local start=$SECONDS
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - start)) s" | tee -a "$out/steps.log"
  tail -n 3 "$out/$name.log"
}

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm \
    --format=csv
  "$py" -c 'import torch, torchvision, platform; print("torch", torch.__version__,
"cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())),
"torchvision", torchvision.__version__, "python", platform.python_version())'
  nproc
  git rev-parse HEAD 2>/dev/null || echo "commit unknown (a copy of the working tree)"
} >"$out/provenance.txt" 2>&1
cat "$out/provenance.txt"

common=(--model resnet50 --image-size 224 --batch-size "$batch" --warmup-steps 20)
for round in 1 2 3; do
  step "bare-$round" "$py" scripts/plain_ddp_loop.py --device cuda --precision bf16 \
    --channels-last "${common[@]}" --steps 100
  step "trainer-$round" "$py" -m bench train --device cuda --precision bf16 --channels-last \
    "${common[@]}" --steps 100 --log-every 0 --results "$out/trainer.jsonl"
done
step matrix "$py" -m bench matrix --launcher native --topologies 1x1 --batch-sizes "$batch" \
  --models resnet50 --precisions bf16 --repeats 1 --results "$out/matrix.jsonl" -- \
  --device cuda --channels-last --image-size 224 --steps 50 --warmup-steps 20
step matrix-too-many-gpus "$py" -m bench matrix --launcher native --topologies 1x2 \
  --results "$out/refused.jsonl" -- --device cuda --steps 5

data=$(mktemp -d)
"$py" - "$data" <<'PYEOF'
import gzip, struct, sys, os
root, n = sys.argv[1], 20000
for split, count in (("train", n), ("t10k", n // 5)):
    images = os.urandom(count * 28 * 28)
    labels = bytes(b % 10 for b in os.urandom(count))
    with gzip.open(f"{root}/{split}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">HBBIII", 0, 8, 3, count, 28, 28) + images)
    with gzip.open(f"{root}/{split}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">HBBI", 0, 8, 1, count) + labels)
PYEOF
step real-data "$py" -m bench train --device cuda --data fashion-mnist --data-dir "$data" \
  --manifest-check off --model resnet18 --image-size 64 --batch-size 256 --epochs 2 \
  --precision bf16 --channels-last --results "$out/real-data.jsonl"
step allreduce "$py" -m bench allreduce --device cuda --backend nccl --max-size 256MiB \
  --results "$out/allreduce.jsonl"
[[ ${COMPILE:-1} == 1 ]] && step compile timeout 300 "$py" -m bench train --device cuda --precision bf16 --channels-last \
  --compile "${common[@]}" --steps 50 --log-every 0 --results "$out/compile.jsonl"
step nvml "$py" -c 'import pynvml as n; n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0);
print(n.nvmlDeviceGetName(h), n.nvmlDeviceGetPowerUsage(h), n.nvmlDeviceGetUtilizationRates(h).gpu,
n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM), n.nvmlSystemGetDriverVersion())'
grep -h samples_per_s "$out"/bare-*.log
"$py" - "$out" <<'PYEOF'
import json, sys, pathlib
for name in ("trainer", "matrix", "real-data", "compile"):
    path = pathlib.Path(sys.argv[1]) / f"{name}.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        r = json.loads(line)
        print(name, r["status"], r.get("samples_per_s"), r.get("mfu"), r.get("gradient_sync"),
              (r.get("bucket_timeline") or {}).get("stamped_by"), r.get("error"))
PYEOF
