#!/usr/bin/env bash
# A short second device call: what the NCCL transport capture and the device reference table
# do on a real GPU (issues 27, 28). scripts/gpu-verify.sh WORKDIR [PACKED.tar.gz]
set -uo pipefail
work=${1:?usage: scripts/gpu-verify.sh WORKDIR [PACKED.tar.gz]}
packed=${2:-}
py=${PYTHON:-python3}
mkdir -p "$work"
cd "$(dirname "$0")/.."
run() {  # run NAME LIMIT CMD...
  local name=$1 limit=$2; shift 2
  echo "== $name: $*" | tee -a "$work/steps.log"
  timeout --kill-after=5 "$limit" "$@" >"$work/$name.log" 2>&1
  echo "== $name: exit $?" | tee -a "$work/steps.log"
  tail -n 3 "$work/$name.log"
  [[ -n $packed ]] && tar czf "$packed" -C "$work" .
}
run nccl-capture 60 "$py" -m bench allreduce --device cuda --backend nccl --max-size 1MiB \
  --results "$work/allreduce.jsonl"
run expect-ib 60 env BENCH_EXPECT_NET=IB "$py" -m bench allreduce --device cuda --backend nccl \
  --max-size 1MiB --results "$work/expect-ib.jsonl"
run accept-reference 120 "$py" -m bench accept --launcher native --nodes 1 --device cuda \
  --stages preflight,device --out "$work/accept"
"$py" - "$work" <<'PYEOF' | tee "$work/summary.txt"
import json, sys, pathlib
root = pathlib.Path(sys.argv[1])
for name in ("allreduce.jsonl", "expect-ib.jsonl"):
    path = root / name
    for line in path.read_text().splitlines() if path.exists() else []:
        r = json.loads(line)
        print(name, r.get("status"), json.dumps(r.get("nccl_transport")), r.get("error"))
verdict = root / "accept" / "accept.json"
if verdict.exists():
    for row in json.loads(verdict.read_text())["rows"]:
        print(row["status"], row["check"], row["measured"], row["expected"], row["reason"][:120])
PYEOF
[[ -n $packed ]] && tar czf "$packed" -C "$work" .
