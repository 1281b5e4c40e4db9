"""``python -m bench VERB ...``: the stack's command line."""
from __future__ import annotations

import importlib
import sys

from bench.rank import front

# verb -> (module, one-line summary). Each module has main(argv, prog) -> exit code.
VERBS = {
    "train": ("bench.rank.train", "train one configuration, append its record (torchrun-able)"),
    "matrix": ("bench.host.matrix", "run the batch-size x topology matrix, a fresh job per repeat"),
    "allreduce": ("bench.rank.allreduce", "all-reduce busbw sweep, nccl-tests style (torchrun)"),
    "doctor": ("bench.host.doctor", "preflight checks of the hosts of a multi-node job"),
    "accept": ("bench.host.accept", "does the cluster work? a verdict per device, link and "
               "data path"),
    "compose": ("bench.host.compose_command", "run one job through Compose, a project per node"),
    "slurm": ("bench.host.slurm_script", "print one job's sbatch script (bench slurm script ...)"),
    "k8s": ("bench.host.k8s_render", "one job's Kubernetes manifests (bench k8s render ...)"),
    "table": ("bench.analysis.table", "result tables in the layout of a lab's scaling table"),
    "plot": ("bench.analysis.plot", "PNG charts of a results file, saved beside it"),
    "accuracy": ("bench.analysis.accuracy", "measured against predicted, per setup and node "
                 "count"),
    "report": ("bench.analysis.report", "the one-page answer beside a results file (.md, .html)"),
    "predict": ("bench.analysis.predict", "predict N-node step time and speedup from a 1-node run"),
    "compare": ("bench.analysis.compare", "compare two result sets cell by cell, with a verdict"),
    "settings": ("bench.host.settings", "check a node's stack settings before Compose starts"),
    "dataset": ("bench.host.dataset", "stage a dataset into the NFS export, with a manifest"),
    "steadiness": ("bench.host.steadiness", "how far this machine's CPUs drift by themselves "
                   "(a loop on each at once)"),
}


def usage() -> str:
    width = max(map(len, VERBS))
    lines = ["usage: python -m bench VERB [options]   (python -m bench VERB --help for more)",
             "", "verbs:"]
    lines += [f"  {verb:<{width}}  {summary}" for verb, (_, summary) in VERBS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        print(f"bench: error: unknown verb {verb!r}; choose from {', '.join(VERBS)}",
              file=sys.stderr)
        return 2
    name = VERBS[verb][0]
    if name in front.CONFIGS:   # a rank verb: its values are checked before torch is imported
        return front.main(name, rest, f"bench {verb}")
    return importlib.import_module(name).main(rest, prog=f"bench {verb}")


if __name__ == "__main__":
    exit_code = main()
    rank_job = sys.modules.get("bench.rank.job")
    if rank_job is not None:  # a rank's verb: a failed rank leaves at once (exit_process)
        rank_job.exit_process(exit_code)
    sys.exit(exit_code)
