"""ddp.log in a table: per placement, DDP's backward growth and its first bucket's
all-reduce time (ddp.py) beside the compute one 2 MiB all-reduce takes in the probe's
shape (shape2.py, POLL=1 CALLS=1) and its time; ranges over ranks and repeats, ms.

    python results/reference/compute-taken/ddp_summary.py results/reference/compute-taken/ddp.log
    python results/reference/compute-taken/ddp_summary.py results/reference/compute-taken/ddp-noop.log
"""
import json
import sys

rows: dict[tuple[str, str], dict[str, list[float]]] = {}
script = placement = None
for line in open(sys.argv[1]):
    if line.startswith("## "):
        script = line.split("SCRIPT=")[1].split()[0]
        placement = line.split("lab.py ")[1].strip()
    elif line.startswith("{"):
        cell = rows.setdefault((placement, script), {"lost": [], "time": []})
        for rank in json.loads(line)["by_rank"]:
            if script == "ddp.py":
                cell["lost"].append(rank["grown_ms"])
                cell["time"].append(rank["b0_2072k_done"] - rank["b0_2072k_handed"])
            else:
                cell["lost"].append(rank["lost_vs_alternate_ms"])
                cell["time"].append(rank["ms_per_call"])


def span(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.1f}-{max(values):.1f}"


print("| placement | DDP backward grows | its 2 MiB all-reduce | probe's shape loses | "
      "its all-reduce |")
print("|---|---|---|---|---|")
for placement in dict.fromkeys(p for p, _ in rows):
    ddp = rows[(placement, "ddp.py")]
    probe = rows.get((placement, "shape2.py"), {"lost": [], "time": []})
    print(f"| {placement} | {span(ddp['lost'])} | {span(ddp['time'])} | "
          f"{span(probe['lost'])} | {span(probe['time'])} |")
