"""Launch a job on Slurm: one batch job per repeat, one srun task per node.

The batch script is the whole job, readable and submittable by hand (``bench slurm
script``). Inside it the first node of the allocation leads the rendezvous (MASTER_ADDR is
its NodeAddr), the port follows the Slurm job id (two jobs sharing a node never collide),
and each task runs the command of its node (SLURM_NODEID), rendered for every node in the
script. Runtimes:

- ``native``: the checkout and its venv on shared storage, the same path on every node;
- ``compose``: the stack's own image, started by Compose on each node;
- ``pyxis``: ``srun --container-image`` on DeepOps-style clusters (enroot + pyxis). Rendered
  only: no enroot exists where this is tested.

The launcher submits with sbatch, polls the job's state, cancels it (scancel) on the
deadline or Ctrl-C, and turns Slurm's own end state (FAILED, TIMEOUT, CANCELLED, NODE_FAIL,
OUT_OF_MEMORY) and reason into the row.
"""
from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys
import time
from pathlib import Path

from bench.host import contract
from bench.host.checks import preflight
from bench.host.contract import NodeSpec
from bench.host.launchers import compose, flags
from bench.host.launchers.base import JobSpec
from bench.host.launchers.flags import derived, launcher_flag
from bench.host.launchers.nodes import CONSOLE, TAIL_LINES, JobOutcome, NodeOutcome, failed_to_start
from bench.host.launchers.scheduler import SchedulerEnd, scheduler_outcome
from bench.options import ConfigError, check_image
from bench.shell import assignment, single_line, words
from bench.topology import Topology

REPO = Path(__file__).resolve().parents[3]
RUNTIMES = ("native", "compose", "pyxis")
PORT_BASE, PORT_SPREAD = 20000, 20000   # MASTER_PORT = base + job id % spread
# Each task's last line: its node and exit code (a task killed by Slurm prints none).
_EXIT_LINE = re.compile(r"\[bench-slurm\] node (\d+) \((\S*)\) exited (-?\d+)")
# What goes into an #SBATCH line, each matched whole (re.fullmatch): one line, one word.
_TIME_LIMIT = re.compile(r"\d{1,6}|\d{1,6}:\d{2}(?::\d{2})?|\d{1,3}-\d{1,2}(?::\d{2}){0,2}")
MAX_TIME_LIMIT_DAYS = 365
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# A log directory in --output=: no blank (sbatch splits the line at blanks), no quote or
# backslash (sbatch reads them), no '%' (Slurm's file name patterns, %j and the like).
_SBATCH_PATH = re.compile(r"/[^\x00-\x20\x7f-\x9f%\\\"']*")
# Each node's task, fixed text with no value in it. Its arguments are every node's command,
# already rendered from the node's spec (``task_argv``): for node rank 0, 1, ... in turn,
# a count and that many words of the command, then a count and the words of its clean-up
# (none for native), run after it whatever its exit. The task runs the pair of its own node
# (SLURM_NODEID), word for word: a value is never parsed as shell. What only the node
# knows, the rendezvous's address and port (the script's MASTER_ADDR and MASTER_PORT), it
# reads from its environment: torchrun as PET_MASTER_ADDR and PET_MASTER_PORT (where its
# flags are absent), Compose as MASTER_ADDR and MASTER_PORT. The last line says the node's
# exit code (``_EXIT_LINE``).
TASK = "; ".join([
    'node=$SLURM_NODEID',
    'if [[ ! $node =~ ^[0-9]+$ ]]; then echo "[bench-slurm] SLURM_NODEID=$node" >&2; exit 2; fi',
    'group=0', 'argv=()', 'rest=()',
    'while (( $# )); do n=$1', 'shift',
    'if (( group == 2 * node )); then argv=("${@:1:n}")',
    'elif (( group == 2 * node + 1 )); then rest=("${@:1:n}"); fi',
    'shift "$n"', 'group=$(( group + 1 )); done',
    'if (( ! ${#argv[@]} )); then echo "[bench-slurm] no command for node $node" >&2; exit 2; fi',
    'export PET_MASTER_ADDR="$MASTER_ADDR" PET_MASTER_PORT="$MASTER_PORT"',
    '"${argv[@]}"', 'rc=$?',
    'if (( ${#rest[@]} )); then "${rest[@]}" >/dev/null 2>&1; fi',
    'echo "[bench-slurm] node $node ($SLURMD_NODENAME) exited $rc"', 'exit $rc'])


def time_limit_s(text: str) -> int | None:
    """Seconds in a Slurm time limit (minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]), or None
    where it is not one, has a field past its clock (5:99), or lies outside 1 minute to
    MAX_TIME_LIMIT_DAYS: Slurm reads 0 as no limit at all, which the deadline relies on."""
    if not _TIME_LIMIT.fullmatch(text):
        return None
    days, _, clock = text.rpartition("-")
    fields = [int(field) for field in clock.split(":")]
    if days:                                    # D-HH[:MM[:SS]]
        hours, minutes, seconds = (fields + [0, 0])[:3]
        on_clock = hours <= 23 and minutes <= 59 and seconds <= 59
        total = ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    elif len(fields) == 3:                      # HH:MM:SS
        hours, minutes, seconds = fields
        on_clock = minutes <= 59 and seconds <= 59
        total = (hours * 60 + minutes) * 60 + seconds
    elif len(fields) == 2:                      # MM:SS
        minutes, seconds = fields
        on_clock, total = seconds <= 59, minutes * 60 + seconds
    else:                                       # minutes
        on_clock, total = True, fields[0] * 60
    if not on_clock:
        return None
    return total if 60 <= total <= MAX_TIME_LIMIT_DAYS * 86400 else None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SlurmOptions:
    """--launcher slurm: the partition and resources each job asks for, and what it runs."""

    partition: str | None = launcher_flag(None, "the partition (default: the cluster's)")
    account: str | None = launcher_flag(None, "the account to charge")
    time_limit: str | None = launcher_flag(None, "each job's --time (default: --deadline "
                                           "rounded up, plus a minute)")
    gpus_per_node: int = launcher_flag(0, "GPUs each node asks for (default: 0, a CPU job)")
    runtime: str = launcher_flag("native", "native (default: the checkout and venv on shared "
                                 "storage), compose, or pyxis (srun --container-image)",
                                 choices=RUNTIMES)
    # The checkout on shared storage (default: this one).
    remote_dir: str | None = launcher_flag(None, flags.REMOTE_DIR_HELP,
                                           parse=flags.absolute_remote_dir)
    image: str | None = launcher_flag(None, "the trainer image (compose), or its registry "
                                      "name (pyxis)", parse=check_image)
    env_file: Path | None = launcher_flag(None, "the node settings (compose)")
    # compose: the trainer service; gpu whenever the nodes ask for GPUs.
    profile: str = launcher_flag("cpu", "the trainer service (compose; gpu with "
                                 "--gpus-per-node)", choices=compose.PROFILES)
    results_root: Path = derived("results_root", Path("results"))
    poll_s: float = 0.25   # a look is one scontrol (ms); a row waits half a look on average

    def __post_init__(self) -> None:
        if self.gpus_per_node:
            object.__setattr__(self, "profile", "gpu")
        compose.check_profile(self.profile)
        for name in ("partition", "account"):
            value = getattr(self, name)
            if value is not None and not _NAME.fullmatch(value):
                raise ConfigError(f"--{name}", value, "must be a Slurm name: letters, digits, "
                                  "'_', '.', '-' (not starting with '-')")
        if self.time_limit is not None and time_limit_s(self.time_limit) is None:
            raise ConfigError("--time-limit", self.time_limit, "must be Slurm's format: "
                              "minutes, MM:SS, HH:MM:SS or D-HH[:MM[:SS]], from 1 minute to "
                              f"{MAX_TIME_LIMIT_DAYS} days (0 would mean none), e.g. 30 or "
                              "1:00:00")
        if not 0 <= self.gpus_per_node <= 64:
            raise ConfigError("--gpus-per-node", self.gpus_per_node, "must be 0 to 64")
        if self.runtime not in RUNTIMES:
            raise ConfigError("--runtime", self.runtime, f"one of {', '.join(RUNTIMES)}")
        if self.runtime in ("compose", "pyxis") and not self.image:
            raise ConfigError("--image", "''", f"the {self.runtime} runtime needs the "
                              "trainer image")
        if self.remote_dir is not None:
            flags.absolute_remote_dir(self.remote_dir, "--remote-dir")


def sbatch_path(setting: str, path: Path) -> str:
    """``path`` made absolute, fit for an #SBATCH line (one line, one word, no pattern),
    else ConfigError naming ``setting``."""
    text = single_line(setting, path.resolve())
    if not _SBATCH_PATH.fullmatch(text):
        raise ConfigError(setting, text, "the Slurm job's logs go under it (#SBATCH "
                          "--output=): give a directory without blanks, quotes, '\\' or '%'")
    return text


def time_limit(options: SlurmOptions, deadline_s: float) -> str:
    """The job's --time: as given, else the deadline rounded up plus a minute, so the
    launcher's own deadline (a clean cancel and a timeout row) comes first."""
    return options.time_limit or str(math.ceil(deadline_s / 60) + 1)


def header(options: SlurmOptions, job: JobSpec) -> list[str]:
    """The script's #SBATCH lines: every value checked whole, so each stays one line."""
    if not _JOB_ID.fullmatch(job.job_id):
        raise ConfigError("job id", single_line("job id", job.job_id), "letters, digits, "
                          "'_', '.', '-'")
    limit = time_limit(options, job.deadline_s)
    if not _TIME_LIMIT.fullmatch(limit):
        raise ConfigError("--time-limit", single_line("--time-limit", limit), "Slurm's format")
    lines = [f"--job-name=bench-{job.job_id}", f"--nodes={job.topology.nodes}",
             "--ntasks-per-node=1", f"--time={limit}",
             f"--output={sbatch_path('--results', job.log_dir)}/slurm-%j.out"]
    lines += [f"--partition={options.partition}"] if options.partition else []
    lines += [f"--account={options.account}"] if options.account else []
    if options.gpus_per_node:
        lines.append(f"--gpus-per-node={int(options.gpus_per_node)}")
    return [f"#SBATCH {line}" for line in lines]


def script(options: SlurmOptions, job: JobSpec) -> str:
    """The sbatch script of one job. Its fixed lines hold no value; every value is in the
    #SBATCH lines (checked whole, one line each) or a word of an argv (``bench.shell``)."""
    directory = options.remote_dir or str(REPO)
    nodes, log_dir = job.topology.nodes, sbatch_path("--results", job.log_dir)
    srun = ["srun", f"--nodes={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            f"--output={log_dir}/node%n.log"]
    if options.runtime == "pyxis":
        srun += [f"--container-image={options.image}", f"--container-mounts={directory}",
                 f"--container-workdir={directory}"]
    about = single_line("the job", f"{nodes} node(s), processes per node {job.topology}, "
                        f"{job.module} ({options.runtime} runtime)")
    return "\n".join([
        "#!/bin/bash",
        f"# bench job {job.job_id}: {about}. Submit with: sbatch THIS_FILE",
        *header(options, job),
        "set -euo pipefail",
        words(["cd", directory]),
        "# The allocation's first node leads the rendezvous; the port follows the job id.",
        'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "MASTER_ADDR=$(scontrol show node \"$first\" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)",
        f"MASTER_PORT=$(( {PORT_BASE} + SLURM_JOB_ID % {PORT_SPREAD} ))",
        "export MASTER_ADDR MASTER_PORT",
        "# One task per node; its node rank is SLURM_NODEID. A task that fails stops the rest.",
        words([*srun, *task_argv(options, job, directory)]),
        ""])


def task_argv(options: SlurmOptions, job: JobSpec, directory: str) -> list[str]:
    """What srun runs on each node: ``bash -c TASK`` with every node's command and clean-up
    (``node_commands``), each word one argument; each node runs its own."""
    groups = []
    for node in job.nodes:
        for argv in node_commands(options, node, directory):
            groups += [str(len(argv)), *argv]
    return ["bash", "-c", TASK, "bench-task", *groups]


def node_commands(options: SlurmOptions, node: NodeSpec,
                  directory: str) -> tuple[list[str], list[str]]:
    """The node's command, and its clean-up (none for native), on its Slurm node; the
    rendezvous's address and port come from the task's environment."""
    if options.runtime == "compose":
        assert options.image is not None  # checked in SlurmOptions
        stack = compose.remote_stack(
            profile=options.profile, image=options.image,
            env_file=str(options.env_file or Path(directory) / "compose" / ".env"),
            results_root=options.results_root)
        project = compose.compose_node(node, stack, master_addr=None, master_port=None)
        env = ["env", *(assignment(k, v) for k, v in sorted(project.env.items()))]
        return [*env, *project.up], [*env, *project.down]
    python = "python3" if options.runtime == "pyxis" else f"{directory}/.venv/bin/python"
    return contract.torchrun_argv(node, master_addr=None, master_port=None,
                                  results=str(node.results.resolve()), python=python), []


def parse_job_state(text: str) -> dict[str, str]:
    """``scontrol show job -o`` (one line of KEY=VALUE) as a dict."""
    fields = {}
    for item in text.split():
        key, sep, value = item.partition("=")
        if sep:
            fields[key] = value
    return fields


def job_state(slurm_id: str) -> SchedulerEnd | None:
    """The job's JobState, Reason, ExitCode and NodeList: from scontrol while the
    controller keeps the job (MinJobAge), else from sacct where accounting runs."""
    out = subprocess.run(["scontrol", "show", "job", "-o", "--", slurm_id],
                         capture_output=True, text=True, timeout=60)
    if out.returncode == 0 and "JobState=" in out.stdout:
        return scontrol_end(slurm_id, out.stdout)
    out = subprocess.run(["sacct", "-n", "-P", "-X", "-j", slurm_id,
                          "-o", "State,Reason,ExitCode,NodeList"],
                         capture_output=True, text=True, timeout=60)
    return sacct_end(slurm_id, out.stdout) if out.returncode == 0 else None


def scontrol_end(slurm_id: str, text: str) -> SchedulerEnd:
    """The job's state from ``scontrol show job -o``."""
    fields = parse_job_state(text)
    return SchedulerEnd(kind="slurm", job_id=slurm_id, state=fields.get("JobState", "UNKNOWN"),
                        reason=fields.get("Reason", ""), exit_code=fields.get("ExitCode", ""),
                        nodes=fields.get("NodeList", ""))


def sacct_end(slurm_id: str, text: str) -> SchedulerEnd | None:
    """The job's state from the first line of ``sacct -n -P -o
    State,Reason,ExitCode,NodeList`` (State may read "CANCELLED by 0"); None if none."""
    lines = text.strip().splitlines()
    if not lines:
        return None
    state, reason, exit_code, nodes = (lines[0].split("|") + ["", "", "", ""])[:4]
    return SchedulerEnd(kind="slurm", job_id=slurm_id, state=(state.split() or ["UNKNOWN"])[0],
                        reason=reason, exit_code=exit_code, nodes=nodes)


def _ended(end: SchedulerEnd | None) -> bool:
    return end is not None and end.ended


def _cancel(slurm_id: str) -> None:
    subprocess.run(["scancel", "--", slurm_id], capture_output=True, timeout=60)


class SlurmLauncher:
    name = "slurm"

    def __init__(self, options: SlurmOptions) -> None:
        self.options = options

    def preflight(self, topologies: list[Topology]) -> None:
        """The job logs' directory fits an #SBATCH line, the controller answers and the
        partition exists, before the first job."""
        # The job's logs go under the results' directory, into #SBATCH --output=.
        sbatch_path("--results", self.options.results_root)
        preflight.require(preflight.slurm(self.options.partition))

    def render(self, job: JobSpec) -> str:
        return script(self.options, job)

    def launch(self, job: JobSpec) -> JobOutcome:
        job.log_dir.mkdir(parents=True, exist_ok=True)
        path = job.log_dir / "job.sbatch"
        path.write_text(self.render(job), encoding="utf-8")
        started = time.monotonic()
        out = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True,
                             text=True, timeout=120)
        if out.returncode != 0:
            return failed_to_start("slurm", f"sbatch refused the job: "
                                   f"{out.stderr.strip()[:300]}")
        slurm_id = out.stdout.strip().split(";")[0]
        if CONSOLE.echo:  # the matrix's one line per job shows it in the row instead
            print(f"[slurm] job {job.job_id} is Slurm job {slurm_id}", file=sys.stderr,
                  flush=True)
        timed_out, state = False, None
        try:
            while not _ended(state := job_state(slurm_id)):
                if time.monotonic() > started + job.deadline_s:
                    timed_out = True
                    _cancel(slurm_id)
                    state = self._await_end(slurm_id)
                    break
                time.sleep(self.options.poll_s)
        except BaseException:  # Ctrl-C or a crash here: the job must not outlive us
            _cancel(slurm_id)
            raise
        return self._outcome(job, slurm_id, state, timed_out, time.monotonic() - started)

    def _await_end(self, slurm_id: str, wait_s: float = 60) -> SchedulerEnd | None:
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            state = job_state(slurm_id)
            if _ended(state):
                return state
            time.sleep(self.options.poll_s)
        return job_state(slurm_id)

    def _outcome(self, job: JobSpec, slurm_id: str, end: SchedulerEnd | None,
                 timed_out: bool, seconds: float) -> JobOutcome:
        """Each task's exit (its last line; a task Slurm killed prints none) and log, and
        Slurm's end; where no task said why (the script failed before srun, or Slurm killed
        them all), the batch output speaks for node 0."""
        nodes = [_node(rank, _read_lines(job.log_dir / f"node{rank}.log"))
                 for rank in range(job.topology.nodes)]
        batch = _read_lines(job.log_dir / f"slurm-{slurm_id}.out")
        return scheduler_outcome(end or SchedulerEnd(kind="slurm", job_id=slurm_id), nodes,
                                 timed_out=timed_out, seconds=seconds,
                                 fallback_lines=batch or nodes[0].output)


def _node(rank: int, lines: list[str]) -> NodeOutcome:
    """A node's outcome from its task's log: the exit and host its last line gives."""
    exits = [m for m in map(_EXIT_LINE.fullmatch, lines) if m]
    code = int(exits[-1].group(3)) if exits else None
    host = exits[-1].group(2) if exits and exits[-1].group(2) else f"node{rank}"
    return NodeOutcome(rank, host, code, lines[-TAIL_LINES:], lines)


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
