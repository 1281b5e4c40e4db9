"""Run rank.py (COMPUTE=mm or smallcnn in the environment), or SCRIPT (shape.py) where
given, on the first NODES of HOSTS emulated hosts at 1 Gbit/s, the CPUs dealt as
the accuracy grid's are (host r on CPU r % 2 on this 2-CPU VM).

    python lab.py NODES [HOSTS [busy]]

``busy``: every host the job leaves free runs spin.py (a one-node neighbour's compute,
as the grid's neighbour jobs are). Needs root (network namespaces)."""
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
from bench.host import netlab  # noqa: E402

nodes = int(sys.argv[1])
hosts = int(sys.argv[2]) if len(sys.argv) > 2 else nodes
busy_neighbours = len(sys.argv) > 3 and sys.argv[3] == "busy"
with netlab.Lab(hosts, 1_000_000_000) as lab:
    procs = []
    for node in lab.nodes[:nodes]:
        env = {**os.environ, **lab.env(node), "MASTER_ADDR": lab.master_addr,
               "MASTER_PORT": "29577", "RANK": str(node.rank), "WORLD_SIZE": str(nodes),
               "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen(node.wrap([sys.executable, str(HERE / os.environ.get("SCRIPT", "rank.py"))]),
                                      env=env, start_new_session=True))
    extra = [subprocess.Popen(node.wrap([sys.executable, str(HERE / "spin.py")]),
                              start_new_session=True)
             for node in lab.nodes[nodes:]] if busy_neighbours else []
    rc = [p.wait() for p in procs]
    for p in extra:
        p.kill()
        p.wait()
    print("rc", rc, "hosts", hosts, "cpus", [n.cpus for n in lab.nodes],
          "busy neighbours", busy_neighbours)
