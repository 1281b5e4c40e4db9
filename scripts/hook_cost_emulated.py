"""``scripts/hook_cost.py`` on two emulated hosts (bench.host.netlab: network namespaces,
one CPU each, a tc-shaped link), where the grid's cells ran: the kernel's work for the
shaped link runs on the hosts' CPUs too, which loopback does not show (issue 29).

  sudo .venv/bin/python scripts/hook_cost_emulated.py --link 5gbit -- \
      --model smallcnn --batch-size 16 --tries 100 --out results/reference/hook-cost/X.json

Everything after ``--`` goes to the script (``--script``: hook_cost.py, or hook_steps.py for
whole training steps). Host side: no torch import here.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from bench.host.netlab import Lab  # noqa: E402
from bench.units import parse_rate  # noqa: E402

PORT = "29611"
SCRIPTS = ("hook_cost.py", "hook_steps.py")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--link", required=True, help="the emulated link's rate, e.g. 5gbit")
    parser.add_argument("--script", choices=SCRIPTS, default=SCRIPTS[0],
                        help="what runs on the hosts (default: %(default)s)")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="-- then the script's flags")
    args = parser.parse_args()
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    rate = parse_rate(args.link, "--link")
    with Lab(2, rate, cpus_per_node=1) as lab:
        print(lab.describe(), file=sys.stderr)
        procs = []
        for node in lab.nodes:
            argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                    "--node-rank", str(node.rank), "--nproc-per-node", "1",
                    "--master-addr", lab.master_addr, "--master-port", PORT,
                    str(REPO / "scripts" / args.script), *rest]
            procs.append(subprocess.Popen(node.wrap(argv), cwd=REPO,
                                          env={**os.environ, "OMP_NUM_THREADS": "1",
                                               **lab.env(node)}))
        codes = [proc.wait() for proc in procs]
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
