"""Run probe.py on NODES emulated hosts (default 2) at RATE bit/s (default 5 Gbit/s), one
CPU each, as the accuracy grid's 2-node cells are. Needs root (network namespaces).

    python lab.py [NODES]

SCRIPT: the probe to run (default probe.py)."""
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
from bench.host import netlab  # noqa: E402

nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 2
# CPUS="1,0": node 0 on CPU 1 and node 1 on CPU 0 (default: node r on CPU r).
cpus = [[int(c)] for c in os.environ["CPUS"].split(",")] if os.environ.get("CPUS") else ()
with netlab.Lab(nodes, int(os.environ.get("RATE", "5000000000")), node_cpus=cpus) as lab:
    procs = []
    for node in lab.nodes:
        env = {**os.environ, **lab.env(node), "MASTER_ADDR": lab.master_addr,
               "MASTER_PORT": "29578", "RANK": str(node.rank), "WORLD_SIZE": str(nodes),
               "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen(node.wrap([sys.executable, str(HERE / os.environ.get("SCRIPT", "probe.py"))]),
                                      env=env, start_new_session=True))
    print("rc", [p.wait() for p in procs], "cpus", [n.cpus for n in lab.nodes], flush=True)
