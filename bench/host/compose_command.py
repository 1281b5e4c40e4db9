"""``python -m bench compose``: one job through Compose, one Compose project per node on
this host (``make bench-cpu``'s nodes, or ``make node-up``'s one node of a job whose other
nodes start elsewhere). The job runs through the Compose launcher, as a matrix cell does;
this module only reads the node settings file and writes the row when rank 0 could not.
"""
from __future__ import annotations

import sys
import uuid
from pathlib import Path

from bench import record
from bench.config import MAX_TIMEOUT_S, OneLineErrorParser, TrainConfig
from bench.host import gpus
from bench.host.failures import describe_failure, failure_record, torn_record_error
from bench.host.launchers.base import JobSpec
from bench.host.launchers.compose import SERVICES, ComposeLauncher, ComposeOptions
from bench.host.settings import NodeSettings, check_data_volume, load
from bench.options import ConfigError, check_image, finite_float, on_head, require_range
from bench.paths import check_writable_file, path_arg
from bench.topology import Topology


def main(argv: list[str] | None = None, prog: str = "bench compose") -> int:
    argv = sys.argv[1:] if argv is None else argv
    trainer_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    parser = OneLineErrorParser(
        prog=prog, description="Run one job through Compose, one Compose project per node "
        "on this host; trainer flags follow `--`.")
    parser.add_argument("--profile", choices=sorted(SERVICES), default="cpu")
    parser.add_argument("--env-file", type=path_arg, required=True)
    parser.add_argument("--nnodes", type=int, help="default: NNODES of the settings")
    parser.add_argument("--nproc-per-node", type=int,
                        help="default: NPROC_PER_NODE of the settings")
    parser.add_argument("--master-port", type=int, help="default: MASTER_PORT of the settings")
    parser.add_argument("--only-this-node", action="store_true",
                        help="start only this node (NODE_RANK of the settings) of a job whose "
                        "other nodes start elsewhere; default: every node on this host")
    parser.add_argument("--image", required=True)
    parser.add_argument("--results", type=path_arg, default=Path("results/runs.jsonl"))
    parser.add_argument("--deadline", type=finite_float, default=1800.0,
                        help="seconds before every node is stopped (default: %(default)s)")
    args = parser.parse_args(own)
    try:
        if not args.env_file.is_file():
            raise ConfigError("--env-file", args.env_file, "no such file: copy "
                              "compose/.env.example to compose/.env and edit it")
        check_image(args.image, "--image")
        require_range(args.deadline, "deadline", 0, MAX_TIMEOUT_S, low_open=True)
        check_writable_file(args.results, "--results")
        # The trainer's flags, checked here as far as they can be off the node: a typo is
        # one line now, not a failed container later; and the config makes the row below.
        with on_head():
            train_cfg = TrainConfig.from_args(trainer_args, "bench train")
        values = load(args.env_file)
        overrides = {"NNODES": args.nnodes, "NPROC_PER_NODE": args.nproc_per_node,
                     "MASTER_PORT": args.master_port}
        values.update({k: str(v) for k, v in overrides.items() if v is not None})
        if not args.only_this_node:
            values["NODE_RANK"] = "0"  # every rank runs here; rank 0's view is checked
        node = NodeSettings.parse(values, args.profile)
        check_data_volume(node, timeout=5)
        # Every node here shares this host's GPUs; a node started on its own has its
        # host's.
        visible = () if args.only_this_node else tuple(gpus.visible_gpus())
        launcher = ComposeLauncher(ComposeOptions(image=args.image, env_file=args.env_file,
                                                  profile=args.profile, visible_gpus=visible))
        job_id = uuid.uuid4().hex[:8]
        job = JobSpec(job_id=job_id, module="bench.rank.train",
                      workload_args=tuple(trainer_args),
                      topology=Topology(node.nnodes, node.nproc_per_node),
                      master_port=node.master_port,
                      # The settings' timeout (checked above), or Compose's default.
                      rdzv_timeout=int(values.get("RDZV_TIMEOUT") or "600"),
                      results=args.results, log_dir=args.results.parent / "logs" / job_id,
                      deadline_s=args.deadline)
        nodes = launcher.nodes(job)
        # Node output stays on the console (no log files under log_dir), as it always has
        # for a job started on its own.
        outcome = launcher.run(job, [nodes[node.node_rank]] if args.only_this_node else nodes,
                               log_dir=None)
    except (ConfigError, RuntimeError) as error:  # bad settings, missing image or Compose
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    records = outcome.records(args.results, job_id)
    # Rank 0 writes the job's one row; when it could not (a node died first, rank 0 hung
    # or never started), the row is written here. A node other than 0 started on its own
    # leaves the row to node 0's host.
    if not records and (not args.only_this_node or node.node_rank == 0):
        rec = failure_record(train_cfg, Topology(node.nnodes, node.nproc_per_node))
        rec["job_id"] = job_id
        if torn := outcome.torn():   # printed, but cut in transit
            rec["error"] = torn_record_error(torn[0], args.results)
        if not outcome.ok:
            rec = describe_failure(rec, outcome, args.deadline)
        record.append(args.results, rec)
        records = [rec]
    if outcome.timed_out:
        print(f"{prog}: the job passed its --deadline of {args.deadline:.0f} s and was stopped",
              file=sys.stderr)
    if outcome.culprit:
        print(f"{prog}: {outcome.culprit.host} exited {outcome.culprit.returncode}; last lines:"
              "\n  " + "\n  ".join(outcome.culprit.last_lines[-5:]), file=sys.stderr)
    for rec in records:
        print(f"{prog}: record {rec['run_id']} status {rec['status']}"
              + (f" ({rec['error']})" if rec.get("error") else "") + f" in {args.results}",
              file=sys.stderr)
    return 0 if outcome.ok and records else 1


if __name__ == "__main__":
    sys.exit(main())
