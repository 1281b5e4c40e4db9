"""``python -m bench k8s render ...``: one job's Kubernetes manifests, to review and apply.

The same job the matrix would run (``bench matrix --launcher k8s``), rendered by the k8s
launcher from the matrix's flags and the node settings file: a headless Service and an
Indexed Job (``--k8s-kind indexed``, the default), or a Kubeflow PyTorchJob
(``--k8s-kind pytorchjob``). A module of its own: it needs both the matrix and the
launchers, which must not need each other.
"""
from __future__ import annotations

import sys
from pathlib import Path

from bench import record
from bench.host import matrix
from bench.host.launchers.k8s import K8sOptions
from bench.host.launchers.registry import build
from bench.options import ConfigError
from bench.paths import HASH_MARK, check_output, write_output

USAGE = ("usage: {prog} render [--output FILE] [--k8s-kind indexed|pytorchjob] "
         "[--topologies NxG] [--batch-sizes B] [--models M] --image IMAGE [--env-file FILE] "
         "[--profile cpu|gpu] [--namespace NS] [--results-claim PVC | --results-host-path DIR] "
         "[--shm-size 8Gi] [--deadline S] -- [trainer flags]\n\n"
         "Prints (or writes to --output) the manifests of one job: `kubectl apply -f` them. "
         "The record follows the marker in node 0's `kubectl logs`, and is appended to "
         "/results/<job>/trainer.jsonl on the results volume.")


def _take_output(argv: list[str]) -> tuple[Path | None, list[str]]:
    """--output FILE (or --output=FILE) among the flags before --, and the rest."""
    end = argv.index("--") if "--" in argv else len(argv)
    own, rest, output = argv[:end], argv[end:], None
    kept = []
    i = 0
    while i < len(own):
        arg = own[i]
        if arg == "--output":
            if i + 1 >= len(own):
                raise ConfigError("--output", "''", "give the file to write, e.g. "
                                  "results/k8s/job.yaml")
            output, i = Path(own[i + 1]), i + 2
            continue
        if arg.startswith("--output="):
            output = Path(arg.partition("=")[2])
        else:
            kept.append(arg)
        i += 1
    return output, kept + rest


def _write(path: Path, text: str) -> None:
    """The whole file or none (paths.write_output), the stack's mark as its first line: a
    file there that bench did not write is never replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_output(path, f"{HASH_MARK}\n{text}", setting="--output")


def main(argv: list[str] | None = None, prog: str = "bench k8s") -> int:
    """``bench k8s render [matrix flags] -- [trainer flags]``: one job's manifests."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE.format(prog=prog))
        return 0 if argv else 2
    if argv[0] != "render":
        print(f"{prog}: error: unknown command {argv[0]!r}; use `{prog} render`",
              file=sys.stderr)
        return 2
    try:
        output, rest = _take_output(argv[1:])
        if output is not None and (output.is_dir() or not output.name):
            raise ConfigError("--output", output, "give a file path, e.g. results/k8s/job.yaml")
        if output is not None:
            check_output(output, "--output")     # before anything is rendered or written
        cfg = matrix.MatrixConfig.from_args(["--launcher", "k8s", *rest], prog)
        if len(cfg.cells) * cfg.repeats != 1:
            raise ConfigError("--topologies", f"{len(cfg.cells)} cell(s) x {cfg.repeats} "
                              "repeat(s)", "the manifests are one job: give one topology, "
                              "batch size and model, or run them all with bench matrix "
                              "--launcher k8s")
        options = cfg.launcher_options
        assert isinstance(options, K8sOptions)  # the table's options class for "k8s"
        launcher = build("k8s", options)
        server = options.settings.nfs_server
        if server in ("localhost", "::1") or (server or "").startswith("127."):
            # The kubelet mounts from the node itself: each node would mount its own loopback.
            print(f"{prog}: warning: DATA_MOUNT_OPTIONS addr={server}: every node would mount "
                  "its own loopback; set addr= to the NFS server's address", file=sys.stderr)
        (cell,) = cfg.cells
        text = launcher.render(matrix.job_spec(cfg, cell, record.new_run_id(), 1))
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    if output is None:
        print(text, end="")
        return 0
    try:
        _write(output, text)
    except OSError as error:
        print(f"{prog}: error: --output={output}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(f"{prog}: wrote {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
