"""Every line the stack hands to a shell, over generated hostile values (Hypothesis, 500
seeded examples per property: tests/conftest.py).

For each renderer (the ssh remote line and its clean-up, the sbatch script and its srun
task, the Compose line, the torchrun line, the Kubernetes entrypoint's env, doctor's remote
lines) and each value a user controls, a value is either refused with ConfigError, never
rendered, or it:

- splits back (shlex.split) to exactly the intended argv, and
- run under bash with stub programs on PATH (each records its argv and exits 0), reaches
  the stub as exactly that word and creates nothing in the watched directory: a
  ``touch pwned`` inside ``$()``, backticks or after a newline never runs.

Each bash example is one bash process (plus the stubs it starts).
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.host import contract
from bench.host.checks import containers, data, network
from bench.host.checks import ssh as ssh_checks
from bench.host.checks.remote import Hosts
from bench.host.launchers import compose, k8s, slurm, ssh
from bench.host.launchers.base import JobSpec, render_commands
from bench.host.launchers.nodes import NodeCommand
from bench.options import ConfigError
from bench.topology import Topology, host_address, parse_hosts
from conftest import EXAMPLE_ENV, REPO
from tests.test_k8s import kubelet_value

# Every directory of this module in one, removed when the test process exits (a module's
# constants cannot take a fixture's tmp_path; five directories left per run add up).
_ROOT = tempfile.TemporaryDirectory(prefix="bench-shell-lines-")


def _directory(name: str) -> Path:
    path = Path(_ROOT.name) / name
    path.mkdir()
    return path


# Where an injected command would write (cwd of every run, and named in the payloads).
WATCH = _directory("watch")
# Where the stubs write what they were called with, one file per call.
CALLS = _directory("calls")
STUBS = _directory("stubs")
PAYLOADS = ["$(touch pwned)", "`touch pwned`", f"$(touch {WATCH}/pwned)",
            f"`touch {WATCH}/pwned`", f"';touch {WATCH}/pwned;'", f'";touch {WATCH}/pwned;"',
            f"\ntouch {WATCH}/pwned\n", f"x; touch {WATCH}/pwned", "a|touch pwned",
            "$((1/0))", "${HOME}", "*", "-rf", "'", '"', "\\", "\n", "", " ",
            "@NODE_RANK@", "%j"]
NO_NUL = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))
# Quotes, $(), backticks, newlines, control characters (no NUL: no argv holds one),
# unicode, up to 4 KiB.
HOSTILE = st.one_of(st.text(NO_NUL, max_size=64), st.sampled_from(PAYLOADS),
                    st.builds(lambda a, p, b: a + p + b, st.text(NO_NUL, max_size=8),
                              st.sampled_from(PAYLOADS), st.text(NO_NUL, max_size=8)),
                    st.text(NO_NUL, min_size=4096, max_size=4096))
ARGS = st.lists(HOSTILE, max_size=4)
# Up to 4 KiB in several values at once: more data than Hypothesis expects by default.
large = settings(suppress_health_check=[HealthCheck.data_too_large, HealthCheck.too_slow])
# One path component: no '/' and not '.' or '..', so the path keeps its shape.
COMPONENT = HOSTILE.map(lambda text: text.replace("/", "_")[:200]).filter(
    lambda text: text not in ("", ".", ".."))
# A remote directory the options accept (printable, no mount separator ',' or ':'): the
# rest of the hostile alphabet, quotes, $(...) and ; included, still reaches the lines.
REMOTE_DIR = COMPONENT.filter(lambda text: text.isprintable() and not set(text) & set(",:"))

# A stub that records its argv (name first, NUL-separated) and answers what it must.
_STUB = """#!/bin/sh
printf '%s\\0' "${{0##*/}}" "$@" > "{calls}/$$"
case "${{0##*/}} $1 $2" in
  "docker image inspect") echo sha256:0123 ;;
  "scontrol show hostnames") echo node1 ;;
  "scontrol show node") echo "NodeName=node1 NodeAddr=10.9.8.7 State=IDLE" ;;
  "getent ahostsv4"*) echo "10.9.8.7 STREAM node1" ;;
esac
exit 0
"""
STUBBED = ("ssh", "docker", "srun", "torchrun", "env", "python3", "pkill", "scontrol", "ip",
           "getent", "timeout", "nvidia-smi", "df", "sbatch")
for _name in STUBBED:
    (STUBS / _name).write_text(_STUB.format(calls=CALLS))
    (STUBS / _name).chmod(0o755)
# What the fixed scripts use besides the stubs; nothing else of the host is on PATH.
_TOOLS = STUBS / "tools"
_TOOLS.mkdir()
for _tool in ("awk", "grep", "head", "cut", "sh", "bash"):
    os.symlink(shutil.which(_tool), _TOOLS / _tool)
PATH = f"{STUBS}:{_TOOLS}"


def run_bash(script: str, env: dict[str, str] | None = None) -> list[list[str]]:
    """``script`` under one bash, ``cd`` a no-op (the hostile directories do not exist
    here) and the stubs first on PATH; the argvs the stubs saw, and nothing created."""
    for stale in CALLS.iterdir():
        stale.unlink()
    # The script comes on stdin: with 4 KiB values quoted twice (a rendered ssh line), it
    # can exceed the kernel's 128 KiB limit on one argument.
    out = subprocess.run(["bash", "-c", "cd() { :; }; . /dev/stdin"], input=script.encode(),
                         cwd=WATCH, capture_output=True, env={"PATH": PATH, **(env or {})},
                         timeout=60)
    created = sorted(p.name for p in WATCH.iterdir())
    for path in WATCH.iterdir():
        path.unlink() if not path.is_dir() else shutil.rmtree(path)
    assert created == [], f"an injected command ran: {created}; stderr {out.stderr[-500:]!r}"
    calls = []
    for path in CALLS.iterdir():
        words = path.read_bytes().split(b"\0")[:-1]
        calls.append([w.decode("utf-8", "surrogateescape") for w in words])
    return calls


def same_calls(seen: list[list[str]], expected: list[list[str]]) -> bool:
    return sorted(map(tuple, seen)) == sorted(map(tuple, expected))


def job_spec(results_dir: Path, args: list[str], nodes: int = 2) -> JobSpec:
    log_dir = results_dir / "logs" / "20260101T000000Z-abcd1234-c1r1"
    return JobSpec(job_id="20260101T000000Z-abcd1234-c1r1", module="bench.rank.train",
                   workload_args=tuple(args), topology=Topology(nodes, 1), master_port=29500,
                   rdzv_timeout=60, results=log_dir / "trainer.jsonl", log_dir=log_dir,
                   deadline_s=600)


def assignments(env: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in sorted(env.items())]


# --- ssh: the remote line (native and Compose) and its clean-up ------------------------------
def _ssh(runtime, env_file, remote_dir, results, args, comm_value, host, monkeypatch):
    monkeypatch.setattr(os, "environ", {"NCCL_DEBUG": comm_value, "PATH": "/usr/bin"})
    try:  # a host name is either strict (bench.topology.check_host) or refused
        hosts = tuple(parse_hosts(f"{host},node-b.example", "--hosts"))
    except ConfigError:
        hosts = ("127.0.0.2", "node-b.example")
    options = ssh.SshOptions(hosts=hosts, runtime=runtime,
                             remote_dir="/" + remote_dir, image="bench-trainer:cpu",
                             env_file=Path(env_file), results_root=Path("/r") / results)
    launcher = ssh.SshLauncher(options)
    job = job_spec(Path("/r") / results, args)
    return options, launcher, job


def _expected_remote(options, launcher, job, rank):
    """The argv each host's shell must run, built here from the values, not the renderer."""
    directory = options.remote_dir
    if options.runtime == "native":
        argv = contract.torchrun_argv(job.nodes[rank], master_addr=host_address(
                                      options.hosts[0]), master_port=29500,
                                      python=f"{directory}/.venv/bin/python")
        up = ["exec", "env", f"NCCL_DEBUG={os.environ['NCCL_DEBUG']}", *argv]
        down = ["pkill", "-TERM", "-f", "--", f"--rdzv-id {job.job_id}"]
        return ["cd", directory, "&&", *up], down
    node = launcher.compose_node(job.nodes[rank], {"NCCL_DEBUG": os.environ["NCCL_DEBUG"]})
    assert node.env["BENCH_ENV_FILE"] == str(options.env_file)
    assert node.env["NCCL_DEBUG"] == os.environ["NCCL_DEBUG"]
    assert shlex.split(node.env["BENCH_ARGS"]) == list(job.workload_args)
    project = ["-f", "compose/docker-compose.yml", "--env-file", str(options.env_file),
               "--profile", "cpu", "-p", f"bench-{job.job_id}-node{rank}".lower()]
    up = ["sh", "-c", compose.REMOTE_UP, "bench-node", "bench-trainer:cpu", *project, "up",
          "--no-log-prefix", "--exit-code-from", "trainer-cpu", "trainer-cpu"]
    down = ["sh", "-c", compose.REMOTE_DOWN, "bench-node", *project, "down", "-v",
            "--remove-orphans", "-t", "5"]
    env = ["env", *assignments(node.env)]
    return (["cd", directory, "&&", "exec", *env, *up], ["cd", directory, "&&", *env, *down])


SSH_VALUES = dict(runtime=st.sampled_from(["native", "compose"]), env_file=HOSTILE.filter(bool),
                  remote_dir=REMOTE_DIR, results=COMPONENT, args=ARGS, comm_value=HOSTILE,
                  host=st.one_of(st.from_regex(r"([a-z_][a-z0-9_-]{0,8}@)?[a-z0-9][a-z0-9.-]"
                                               r"{0,30}", fullmatch=True), HOSTILE))


@large
@given(**SSH_VALUES)
def test_the_ssh_lines_split_back_to_their_argv(runtime, env_file, remote_dir, results, args,
                                                 comm_value, host):
    with pytest.MonkeyPatch.context() as monkeypatch:
        options, launcher, job = _ssh(runtime, env_file, remote_dir, results, args,
                                      comm_value, host, monkeypatch)
        commands, cleanups = launcher.commands(job)
        for rank, (command, cleanup) in enumerate(zip(commands, cleanups, strict=True)):
            up, down = _expected_remote(options, launcher, job, rank)
            assert command.argv[-3:-1] == ["--", options.hosts[rank]]
            assert shlex.split(command.argv[-1]) == up
            assert shlex.split(cleanup[-1]) == down


@large
@given(**SSH_VALUES)
def test_the_ssh_lines_run_nothing_and_reach_ssh_and_env_whole(runtime, env_file, remote_dir,
                                                                results, args, comm_value,
                                                                host):
    with pytest.MonkeyPatch.context() as monkeypatch:
        options, launcher, job = _ssh(runtime, env_file, remote_dir, results, args,
                                      comm_value, host, monkeypatch)
        commands, cleanups = launcher.commands(job)
        rendered = launcher.render(job)
        remote = [command.argv[-1] for command in commands] + [c[-1] for c in cleanups]
    # The rendered job as a user would paste it (ssh stubbed), then each host's own lines
    # as its shell runs them (each in a subshell: they end in exec).
    script = rendered + "\n" + "\n".join(f"( {line}\n)" for line in remote)
    calls = run_bash(script)
    expected = [command.argv for command in commands] + cleanups
    for line in remote:
        argv = shlex.split(line)
        argv = argv[argv.index("&&") + 1:] if "&&" in argv else argv
        expected.append(argv[1:] if argv[0] == "exec" else argv)
    assert same_calls(calls, expected), (calls, expected)


# --- Slurm: the sbatch script and its srun task ----------------------------------------------
# Shell syntax an #SBATCH path may hold (no blank, quote, backslash or '%'): still one word.
SBATCH_PAYLOADS = ["$(touch${IFS}pwned)", "`touch${IFS}pwned`", ";touch${IFS}pwned;",
                   "|touch${IFS}pwned", "&&touch${IFS}pwned", "$HOME", "*", "#x", "(x)"]
SBATCH_SAFE = st.one_of(st.sampled_from(SBATCH_PAYLOADS), st.text(st.characters(
    min_codepoint=0x21, max_codepoint=0x2fff, blacklist_characters="/%\\'\"\x7f",
    blacklist_categories=("Cc", "Cs")), min_size=1, max_size=32).filter(
    lambda t: t not in (".", "..")))
SLURM_VALUES = dict(
    runtime=st.sampled_from(["native", "compose", "pyxis"]),
    results=st.one_of(SBATCH_SAFE, COMPONENT),
    remote_dir=REMOTE_DIR, env_file=HOSTILE.filter(bool), args=ARGS,
    partition=st.sampled_from([None, "gpu"]), account=st.sampled_from([None, "lab-1"]),
    time_limit=st.sampled_from([None, "1:00:00", "2-12"]), gpus=st.integers(0, 8))


@large
@given(field=st.sampled_from(["partition", "account", "time_limit"]),
       value=st.one_of(HOSTILE, st.sampled_from(["gpu\n", "10\n", "1:00:00\n", "a\rb"])))
def test_an_sbatch_name_or_time_is_whole_or_refused(field, value):
    """What goes into an #SBATCH line matches whole (no trailing newline gets past a `$`)."""
    try:
        slurm.SlurmOptions(**{field: value})
    except ConfigError:
        return
    pattern = slurm._TIME_LIMIT if field == "time_limit" else slurm._NAME
    assert pattern.fullmatch(value) and value.isascii() and value.isprintable()


def _script(runtime, results, remote_dir, env_file, args, partition, account, time_limit,
            gpus):
    """(options, job, script), or None where a value was refused with ConfigError."""
    try:
        options = slurm.SlurmOptions(
            partition=partition, account=account, time_limit=time_limit, gpus_per_node=gpus,
            runtime=runtime, remote_dir="/" + remote_dir, image="bench-trainer:cpu",
            env_file=Path(env_file), results_root=WATCH.parent / results)
        job = job_spec(WATCH.parent / results, args)
        return options, job, slurm.script(options, job)
    except ConfigError:
        return None


@large
@given(**SLURM_VALUES)
def test_the_sbatch_script_has_its_header_and_one_srun_argv(**values):
    made = _script(**values)
    if made is None:  # refused with ConfigError: nothing rendered
        return
    options, job, text = made
    # sbatch reads #SBATCH lines up to the first command: exactly the expected ones.
    head = text.split("\nset -euo pipefail\n", 1)[0].split("\n")
    expected = 5 + bool(options.partition) + bool(options.account) + bool(options.gpus_per_node)
    assert head[0] == "#!/bin/bash" and head[1].startswith("# bench job ")
    assert len(head) == 2 + expected and all(line.startswith("#SBATCH --") for line in head[2:])
    srun = shlex.split(srun_line(text))
    task = slurm.task_argv(options, job, options.remote_dir)
    assert srun[0] == "srun" and srun[-len(task):] == task
    assert f"--output={job.log_dir}/node%n.log" in srun
    main = task[5:5 + int(task[4])]
    if options.runtime == "compose":
        assert main[main.index("--env-file") + 1] == str(options.env_file)
    elif values["args"]:
        assert main[-len(values["args"]):] == values["args"]


def srun_line(text: str) -> str:
    """The script's last command (it may span lines: a quoted word can hold a newline)."""
    return text.split("A task that fails stops the rest.\n", 1)[1]


@large
@given(**SLURM_VALUES)
def test_the_sbatch_script_runs_nothing_and_hands_srun_its_argv(**values):
    made = _script(**values)
    if made is None:
        return
    options, job, text = made
    calls = run_bash(text, env={"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node1"})
    sruns = [call for call in calls if call[0] == "srun"]
    assert sruns == [shlex.split(srun_line(text))], calls


@large
@given(**SLURM_VALUES, node=st.sampled_from(["0", "1"]))
def test_the_srun_task_runs_its_nodes_command_and_nothing_else(node, **values):
    """Each node runs its own command and clean-up, word for word as rendered from its spec:
    a value holding what once was a placeholder (@NODE_RANK@) is no longer special."""
    made = _script(**values)
    if made is None:
        return
    options, job, _ = made
    if options.runtime == "native":  # the venv's python is not here: pyxis runs python3
        options = slurm.SlurmOptions(runtime="pyxis", image="bench-trainer:cpu",
                                     remote_dir=options.remote_dir,
                                     results_root=options.results_root)
    task = slurm.task_argv(options, job, options.remote_dir)
    calls = run_bash(shlex.join(task), env={"SLURM_NODEID": node, "SLURMD_NODENAME": "n1",
                                            "MASTER_ADDR": "10.9.8.7", "MASTER_PORT": "23456"})
    main, cleanup = slurm.node_commands(options, job.nodes[int(node)], options.remote_dir)
    assert same_calls(calls, [main, *([cleanup] if cleanup else [])]), (calls, main)


@pytest.mark.parametrize("verb", [["slurm", "script"], ["matrix", "--launcher", "slurm"]])
def test_a_newline_in_results_is_one_line_exit_2(verb, tmp_path):
    """The old script put it on a line of its own after #SBATCH --output=, and ran it."""
    results = tmp_path / "r\ntouch pwned" / "runs.jsonl"
    out = subprocess.run([sys.executable, "-m", "bench", *verb, "--topologies", "1x1",
                          "--results", str(results), "--", "--steps", "1"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    lines = out.stderr.splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "--results" in lines[0], out.stderr
    assert out.stdout == "" and not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("field,value", [("time_limit", "10\n"), ("partition", "gpu\n"),
                                         ("account", "lab\n"), ("time_limit", "10\nid")])
def test_a_trailing_newline_no_longer_passes_the_slurm_checks(field, value):
    with pytest.raises(ConfigError):
        slurm.SlurmOptions(**{field: value})


# --- Compose and torchrun lines on this host --------------------------------------------------
@large
@given(env_file=HOSTILE.filter(bool), results=COMPONENT, args=ARGS)
def test_the_compose_lines_split_back_and_run_nothing(env_file, results, args):
    # The options check that the settings file exists; this test is about the lines that
    # name it, whatever its path, so every path is taken as an existing file.
    with mock.patch.object(Path, "is_file", return_value=True):
        options = compose.ComposeOptions(image="bench-trainer:cpu", env_file=Path(env_file),
                                         profile="cpu")
    job = job_spec(WATCH.parent / results, args, nodes=2)
    launcher = compose.ComposeLauncher(options)
    rendered = launcher.render(job)
    projects = launcher.projects(job, job.nodes, ["docker", "compose"],
                                 ("<id of bench-trainer:cpu>",) * 2)
    expected, words = [], []
    for command, _ in projects:
        argv = ["env", *assignments(command.env), *command.argv]
        assert argv[argv.index("--env-file") + 1] == str(Path(env_file))
        assert shlex.split(command.env["BENCH_ARGS"]) == list(args)
        expected.append(argv)
        words += ["cd", str(REPO), "&&", *argv]
    assert shlex.split(rendered, comments=True) == words
    assert same_calls(run_bash(rendered), expected)


@large
@given(results=HOSTILE.filter(bool), args=ARGS, job_id=HOSTILE.filter(bool),
       addr=HOSTILE.filter(bool))
def test_the_torchrun_line_splits_back_and_runs_nothing(results, args, job_id, addr):
    node = contract.NodeSpec(rank=0, nnodes=1, nproc=2, master_port=29500, rdzv_timeout=60,
                             job_id=job_id, module="bench.rank.train",
                             workload_args=tuple(args), results=Path(results), workdir=REPO)
    argv = contract.torchrun_argv(node, master_addr=addr, master_port=29500,
                                  results=results, python="python3")
    line = render_commands([NodeCommand(0, "node0", argv)])
    assert shlex.split(line, comments=True) == argv
    assert run_bash(line) == [argv]


def test_the_netns_render_quotes_every_word():
    from bench.host.launchers import netns

    launcher = netns.NetnsLauncher(netns.NetnsOptions(link_bps=10**9, cpus_per_node=1,
                                                      lab_nodes=2))
    job = job_spec(WATCH.parent / "r", ["--data-dir", "$(touch pwned)"])
    assert shlex.split(launcher.render(job).splitlines()[-1])[-2:] == ["--data-dir",
                                                                       "$(touch pwned)"]


# --- Kubernetes: the pod's env, run by the image's entrypoint --------------------------------
K8S_SETTINGS = _directory("k8s") / "node.env"
# python3 for the entrypoint: the real one for its shlex step, the recording stub for the
# agent it ends with (python3 -m bench.rank.torchrun), so that nothing starts.
REAL_PYTHON = _directory("python")
(REAL_PYTHON / "python3").write_text(
    '#!/bin/sh\nif [ "$1 $2" = "-m bench.rank.torchrun" ]; then exec '
    f'{shlex.quote(str(STUBS / "python3"))} "$@"; fi\n'
    f'exec {shlex.quote(str(Path(sys.executable).resolve()))} "$@"\n')
(REAL_PYTHON / "python3").chmod(0o755)
K8S_SETTINGS.write_text(EXAMPLE_ENV.read_text() + "\nDATA_MOUNT_OPTIONS=addr=10.0.0.5,"
                        "nfsvers=4.1,ro\nNCCL_SOCKET_IFNAME=eth0\nGLOO_SOCKET_IFNAME=eth0\n")


@large
@given(args=ARGS)
def test_the_kubernetes_entrypoint_gets_exactly_the_flags_or_they_are_refused(args):
    options = k8s.K8sOptions(image="bench-trainer:cpu", env_file=K8S_SETTINGS)
    job = job_spec(Path("/results"), args, nodes=1)
    try:
        docs = k8s.manifests(options, job)
    except ConfigError:
        return
    (container,) = docs[-1]["spec"]["template"]["spec"]["containers"]
    # What the container gets: each value after the kubelet's $(NAME) and $$ expansion.
    env = {item["name"]: kubelet_value(item["value"]) for item in container["env"]}
    assert shlex.split(env["BENCH_ARGS"]) == list(args)
    # The container's command: the image's entrypoint with this env. It splits BENCH_ARGS
    # with the real python3's shlex; only the torchrun agent it ends with is stubbed.
    calls = run_bash(shlex.join(["sh", str(REPO / "docker" / "node-entrypoint.sh")]),
                     env={**{k: v for k, v in env.items() if k != "HOME"},
                          "PATH": f"{REAL_PYTHON}:{PATH}"})
    assert len(calls) == 1 and calls[0][:3] == ["python3", "-m", "bench.rank.torchrun"]
    assert calls[0][len(calls[0]) - len(args):] == list(args)


# --- doctor's remote lines ---------------------------------------------------------------------
class Recording:
    """A remote whose commands are recorded, and answered as a healthy GPU host."""

    def __init__(self):
        self.commands: list[str] = []

    def run(self, host, command, timeout=None):
        self.commands.append(command)
        out = "580.95.05" if command.startswith("nvidia-smi") else "dev eth0" \
            if "ip route" in command else ""
        return subprocess.CompletedProcess(command, 0, out, "")


@large
@given(image=HOSTILE.filter(bool), ifname=HOSTILE, options=HOSTILE, device=HOSTILE,
       dataset=HOSTILE, host=st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True))
def test_doctor_lines_split_back_and_run_nothing(image, ifname, options, device, dataset,
                                                 host):
    settings = {"NCCL_SOCKET_IFNAME": ifname, "GLOO_SOCKET_IFNAME": "eth0",
                "DATA_MOUNT_TYPE": "nfs", "DATA_MOUNT_OPTIONS": options,
                "DATA_DEVICE": device}
    recording = Recording()
    job = Hosts((host, "127.0.0.2"), recording, image=image, settings=settings,
                dataset=dataset)
    containers.image_row(recording, host, image)
    data.dataset_row(job, host)
    network.interface_rows(job, host)
    ssh_checks.resolve_row(job, host)
    network.interface_addresses(job, host, [ifname or "eth0"])
    for command in recording.commands:
        argv = shlex.split(command)
        if argv[0] == "docker":
            assert image in argv
        if "dataset" in argv:
            assert f"/data/{dataset}" in argv
    calls = run_bash("\n".join(recording.commands))
    expected_images = [c for c in calls if c[0] == "docker"]
    assert all(image in call for call in expected_images), calls
    names = [n.lstrip("=") for n in ifname.split(",") if n and not n.startswith("^")]
    links = {c[3] for c in calls if c[:3] == ["ip", "link", "show"]}
    assert links <= {*names, "eth0"} and (not names or names[0] in links), (links, names)


# --- the Slurm test cluster's state directory -------------------------------------------------

@pytest.mark.parametrize("state", ["/tmp/s$(touch {mark})", "/tmp/a\nb", "/tmp/a b",
                                   "/tmp/`touch {mark}`", "/tmp/../etc", "relative", ""])
def test_the_slurm_clusters_directory_is_refused_unless_plain(state, tmp_path):
    """BENCH_SLURM_DIR reaches slurm.conf's lines and the `env` line a caller evals: any
    other character than letters, digits and . _ - / is refused in one line, exit 2."""
    mark = tmp_path / "ran"
    env = {**os.environ, "BENCH_SLURM_DIR": state.format(mark=mark)}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "slurm-cluster.sh"), "env"],
                          env=env, capture_output=True, text=True, timeout=30)
    if state == "":      # unset or empty: the default directory
        assert proc.returncode == 0 and proc.stdout.startswith("export SLURM_CONF="), proc
        return
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert len(proc.stderr.splitlines()) == 1 and "BENCH_SLURM_DIR=" in proc.stderr, proc
    assert not mark.exists()


def test_the_slurm_clusters_env_line_evaluates_to_its_directory(tmp_path):
    state = tmp_path / "state-1.x"
    line = subprocess.run(["bash", str(REPO / "scripts" / "slurm-cluster.sh"), "env"],
                          env={**os.environ, "BENCH_SLURM_DIR": str(state)},
                          capture_output=True, text=True, timeout=30, check=True).stdout
    shown = subprocess.run(["bash", "-c", line + 'printf %s "$SLURM_CONF"'],
                           capture_output=True, text=True, timeout=30, check=True).stdout
    assert shown == str(state / "slurm.conf")
