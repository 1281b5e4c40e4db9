#!/usr/bin/env bash
# GPU telemetry and memory on one GPU, natively, in one go (the lent-GPU check of the seed
# experiments): the trainer with the NVML sampler and without it, alternated, for the
# sampler's overhead and its figures; FSDP on one GPU; and a real CUDA out-of-memory row
# from the deep & wide MLP through the matrix.
# Usage: scripts/gpu-telemetry.sh OUTDIR   (PYTHON=python3, BATCH=256)
set -uo pipefail
out=${1:?usage: scripts/gpu-telemetry.sh OUTDIR}
py=${PYTHON:-python3}
batch=${BATCH:-256}
mkdir -p "$out"
cd "$(dirname "$0")/.."

step() {  # step NAME CMD...: run, log, keep going
  local name=$1; shift
  echo "== $name: $*" | tee -a "$out/steps.log"
  local start=$SECONDS
  "$@" >"$out/$name.log" 2>&1
  echo "== $name: exit $? in $((SECONDS - start)) s" | tee -a "$out/steps.log"
}

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv
  "$py" -c 'import torch, platform; print("torch", torch.__version__, "cuda",
torch.version.cuda, "python", platform.python_version())'
  "$py" -c 'import pynvml; print("nvidia-ml-py present")' 2>&1
} >"$out/provenance.txt" 2>&1

common=(--device cuda --precision bf16 --channels-last --model resnet50 --image-size 224
        --batch-size "$batch" --warmup-steps 20 --steps 150 --log-every 0)
for round in 1 2 3; do
  step "with-sampler-$round" "$py" -m bench train "${common[@]}" --results "$out/telemetry.jsonl"
  step "without-sampler-$round" "$py" -m bench train "${common[@]}" --no-telemetry \
    --results "$out/no-telemetry.jsonl"
done
step fsdp-1gpu "$py" -m bench train "${common[@]}" --strategy fsdp --steps 50 \
  --results "$out/fsdp.jsonl"
# 8.6 billion parameters: 34 GB of fp32 weights, as much again for gradients and for
# momentum: past one 80 GB GPU, so CUDA's own out-of-memory ends the run (status oom).
step cuda-oom timeout 400 "$py" -m bench matrix --launcher native --topologies 1x1 \
  --models mlp --batch-sizes 8 --results "$out/oom.jsonl" -- --device cuda \
  --mlp-width 32768 --mlp-depth 8 --steps 3 --warmup-steps 1 --comm-probe-steps 0
"$py" - "$out" <<'PYEOF'
import json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
def rows(name):
    path = out / f"{name}.jsonl"
    return [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []
on, off = rows("telemetry"), rows("no-telemetry")
print("with sampler   ", [round(r["samples_per_s"], 1) for r in on])
print("without sampler", [round(r["samples_per_s"], 1) for r in off])
if on and off:
    print("ratio of medians", statistics.median(r["samples_per_s"] for r in on)
          / statistics.median(r["samples_per_s"] for r in off))
for r in on[:1]:
    t = r["telemetry"]
    print({k: t.get(k) for k in ("source", "gpu_util_pct", "power_w", "sm_clock_mhz",
                                  "temperature_c", "memory_used_bytes", "energy_j",
                                  "energy_source", "energy_per_sample_j", "samples_per_watt",
                                  "throttle_reasons")})
for name in ("fsdp", "oom"):
    for r in rows(name):
        print(name, r["status"], r.get("samples_per_s"), r.get("peak_memory_bytes"),
              (r.get("error") or "")[:200])
PYEOF
