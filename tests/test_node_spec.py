"""One node spec per node, rendered by each launcher its own way, and launched as rendered.

- ``JobSpec.nodes``: one ``NodeSpec`` per node, from the job's own fields (uneven nodes keep
  their process counts).
- For every launcher, what ``launch`` starts is exactly what ``render`` printed (the run's
  commands are captured where they would start).
- A property (Hypothesis, tests/conftest.py's profile): for any topology (uneven ones
  included) and any workload flags, each launcher's rendered node lines parse back
  (``shlex.split``, the Slurm task's own format) to each node's spec: its torchrun argv or
  its node contract env.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bench.host import contract, gpus, netlab
from bench.host.launchers import compose, native, netns, slurm, ssh
from bench.host.launchers.base import JobSpec, render_commands
from bench.host.launchers.nodes import JobOutcome, NodeCommand
from bench.shell import words
from bench.topology import Topology, host_address
from conftest import EXAMPLE_ENV, REPO

JOB_ID = "20260101T000000Z-abcd1234-c1r1"
# Workload flags: blanks, quotes, shell syntax, newlines, what once was a Slurm placeholder.
FLAG = st.one_of(st.text(st.characters(blacklist_characters="\x00",
                                       blacklist_categories=("Cs",)), max_size=24),
                 st.sampled_from(["$(touch pwned)", "`id`", "'", '"', "\n", "", " ", "*",
                                  "@NODE_RANK@", "@NPROC@", "--node_rank", "env", "cd"]))
ARGS = st.lists(FLAG, max_size=4).map(tuple)
TOPOLOGY = st.lists(st.integers(1, 3), min_size=1, max_size=4).map(Topology.of_counts)
UNEVEN = Topology.parse("1+1+2")


def job_spec(tmp: Path, topology: Topology, args: tuple[str, ...]) -> JobSpec:
    log_dir = tmp / "logs" / JOB_ID
    return JobSpec(job_id=JOB_ID, module="bench.rank.train", workload_args=args,
                   topology=topology, master_port=29500, rdzv_timeout=60,
                   results=log_dir / "trainer.jsonl", log_dir=log_dir, deadline_s=600)


def test_a_job_is_one_spec_per_node():
    job = job_spec(Path("/r"), UNEVEN, ("--steps", "2"))
    assert [(n.rank, n.nnodes, n.nproc) for n in job.nodes] == [(0, 3, 1), (1, 3, 1), (2, 3, 2)]
    assert all(n.job_id == JOB_ID and n.workload_args == ("--steps", "2") and n.devices is None
               and n.results == job.results and n.master_port == 29500 for n in job.nodes)


# --- what launch starts is what render printed -------------------------------------------
class Captured:
    """Stands in for run_nodes: keeps the commands (and the clean-up) it was handed."""

    def __init__(self) -> None:
        self.commands: list[NodeCommand] = []
        self.cleanup = None

    def __call__(self, commands, *, deadline_s, log_dir=None, cleanup=None, cwd=None,
                 background_done=None):
        self.commands, self.cleanup = list(commands), cleanup
        self.background_done = background_done
        return JobOutcome([], False, 0.0, None)


def without_temp_dir(commands: list[NodeCommand]) -> list[NodeCommand]:
    """The commands less the job's own temporary directory, which only a launch makes."""
    out = []
    for command in commands:
        env = {k: v for k, v in (command.env or {}).items()
               if k not in ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR")}
        out.append(NodeCommand(command.rank, command.host, command.argv, env or None,
                               command.background))
    return out


@pytest.mark.parametrize("visible", [(), ("0", "1", "2", "3")])
def test_native_launches_what_it_renders(tmp_path, monkeypatch, visible):
    captured = Captured()
    monkeypatch.setattr(native, "run_nodes", captured)
    launcher = native.NativeLauncher(native.NativeOptions(visible_gpus=visible))
    job = job_spec(tmp_path, UNEVEN, ("--steps", "1"))
    launcher.launch(job)
    assert len(captured.commands) == 3
    assert all(c.env and c.env["TMPDIR"] for c in captured.commands)
    assert render_commands(without_temp_dir(captured.commands)) == launcher.render(job)


def test_netns_launches_what_it_renders(tmp_path, monkeypatch):
    class Built(netlab.Lab):  # the lab's namespaces are not made here: root is not needed
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    lab = Built(4, 10**9, cpus_per_node=1)
    captured = Captured()
    monkeypatch.setattr(netns, "run_nodes", captured)
    launcher = netns.NetnsLauncher(netns.NetnsOptions(link_bps=10**9, cpus_per_node=1,
                                                      lab_nodes=4))
    monkeypatch.setattr(launcher, "lab", lambda job: lab)
    job = job_spec(tmp_path, UNEVEN, ("--device", "cpu", "--steps", "1"))
    launcher.launch(job)
    assert [c.host for c in captured.commands] == ["node0", "node1", "node2", "neighbour3"]
    rendered = launcher.render(job)
    assert rendered.split("\n", 2)[2] == render_commands(without_temp_dir(captured.commands))


def test_compose_launches_what_it_renders(tmp_path, monkeypatch):
    """The same projects; only a launch reads the image's id (here stubbed to what a dry
    run shows) and finds this host's Compose."""
    (tmp_path / "node.env").write_text("")   # the options check that the settings exist
    options = compose.ComposeOptions(image="bench-trainer:cpu", env_file=tmp_path / "node.env",
                                     profile="gpu", visible_gpus=("0", "1", "2", "3"))
    captured = Captured()
    monkeypatch.setattr(compose, "run_nodes", captured)
    monkeypatch.setattr(compose, "image_identity", lambda image: (f"<id of {image}>",) * 2)
    monkeypatch.setattr(contract, "compose_command", lambda: list(compose.RENDERED_PROGRAM))
    launcher = compose.ComposeLauncher(options)
    job = job_spec(tmp_path, UNEVEN, ("--steps", "1"))
    launcher.launch(job)
    assert [c.env["BENCH_GPUS"] for c in captured.commands] == ["0", "1", "2,3"]
    ups = render_commands(captured.commands, REPO)
    assert launcher.render(job).startswith(ups + "\n# afterwards")
    downs = []
    monkeypatch.setattr(subprocess, "Popen", lambda argv, **kw: downs.append(
        (argv, kw["env"])) or _Done())
    captured.cleanup()
    projects = [c.argv[c.argv.index("-p") + 1] for c in captured.commands]
    assert [argv[argv.index("-p") + 1:] for argv, _ in downs] == [
        [project, "down", "-v", "--remove-orphans", "-t", "5"] for project in projects]


class _Done:
    def wait(self, timeout=None):
        return 0


@pytest.mark.parametrize("runtime", ["native", "compose"])
def test_ssh_launches_what_it_renders(tmp_path, monkeypatch, runtime):
    monkeypatch.setattr(os, "environ", {"NCCL_DEBUG": "INFO", "PATH": "/usr/bin"})
    captured = Captured()
    monkeypatch.setattr(ssh, "run_nodes", captured)
    launcher = ssh.SshLauncher(ssh.SshOptions(
        hosts=("127.0.0.2", "127.0.0.3", "127.0.0.4"), runtime=runtime, remote_dir="/srv/b",
        image="bench-trainer:cpu", results_root=tmp_path))
    job = job_spec(tmp_path, UNEVEN, ("--steps", "1"))
    launcher.launch(job)
    stops = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: stops.append(argv))
    captured.cleanup()
    assert launcher.render(job) == (render_commands(captured.commands)
                                    + "\n# afterwards, on every host:\n"
                                    + "\n".join(words(argv) for argv in stops))


def test_slurm_submits_what_it_renders(tmp_path, monkeypatch):
    submitted = []

    def sbatch(argv, **kw):
        submitted.append(Path(argv[-1]).read_text(encoding="utf-8"))
        return subprocess.CompletedProcess(argv, 1, "", "no controller here")

    monkeypatch.setattr(subprocess, "run", sbatch)
    launcher = slurm.SlurmLauncher(slurm.SlurmOptions(remote_dir="/srv/b"))
    job = job_spec(tmp_path, UNEVEN, ("--steps", "1"))
    outcome = launcher.launch(job)
    assert not outcome.ok and submitted == [launcher.render(job)]


# --- every launcher's rendered lines parse back to each node's spec -----------------------
def check_torchrun(argv: list[str], node: contract.NodeSpec) -> None:
    """The node's place, read from the argv itself (torchrun's flags come first)."""
    flag = {name: argv[argv.index(name) + 1] for name in
            ("--nnodes", "--node_rank", "--nproc_per_node", "--rdzv-id")}
    assert flag == {"--nnodes": str(node.nnodes), "--node_rank": str(node.rank),
                    "--nproc_per_node": str(node.nproc), "--rdzv-id": node.job_id}
    assert tuple(argv[len(argv) - len(node.workload_args):]) == node.workload_args


def read_env(parsed: list[str], start: int) -> tuple[dict[str, str], int]:
    """``env K=V ...`` from ``parsed[start]`` on: the assignments, and where the command
    after them starts."""
    assert parsed[start] == "env"
    env, i = {}, start + 1
    while "=" in parsed[i] and parsed[i].split("=", 1)[0].isidentifier():
        name, value = parsed[i].split("=", 1)
        env[name] = value
        i += 1
    return env, i


def check_contract_env(env: dict[str, str], node: contract.NodeSpec) -> None:
    assert (env["NNODES"], env["NODE_RANK"], env["NPROC_PER_NODE"], env["BENCH_JOB_ID"]) == (
        str(node.nnodes), str(node.rank), str(node.nproc), node.job_id)
    assert tuple(shlex.split(env["BENCH_ARGS"])) == node.workload_args
    assert env.get("BENCH_GPUS") == node.devices


TMP = Path("/tmp/bench-node-spec")
BASH = shutil.which("bash")


@given(topology=TOPOLOGY, args=ARGS, on_gpus=st.booleans())
@example(topology=UNEVEN, args=("--steps", "1"), on_gpus=True)
def test_native_lines_parse_back_to_each_nodes_spec(topology, args, on_gpus):
    visible = tuple(str(i) for i in range(topology.devices)) if on_gpus else ()
    job = job_spec(TMP, topology, args)
    parsed = shlex.split(native.NativeLauncher(native.NativeOptions(visible_gpus=visible))
                         .render(job), comments=True)
    placed = gpus.wants_gpus(list(args), list(visible))
    blocks = gpus.assign(topology, list(visible)) if placed else [None] * topology.nodes
    i = 0
    for node, block in zip(job.nodes, blocks, strict=True):
        if block is not None:
            env, i = read_env(parsed, i)
            assert env == {"CUDA_VISIBLE_DEVICES": block, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                           "BENCH_GPUS": block}
        argv = contract.torchrun_argv(node, master_addr="127.0.0.1", master_port=29500,
                                      store_bind="127.0.0.1")
        assert parsed[i:i + len(argv)] == argv
        check_torchrun(argv, node)
        i += len(argv)
    assert i == len(parsed)


@given(topology=TOPOLOGY, args=ARGS)
@example(topology=UNEVEN, args=("--steps", "1"))
def test_netns_lines_parse_back_to_each_nodes_spec(topology, args):
    lab = netlab.Lab(4, 10**9, cpus_per_node=1)
    launcher = netns.NetnsLauncher(netns.NetnsOptions(link_bps=10**9, cpus_per_node=1,
                                                      lab_nodes=4))
    launcher.lab = lambda job: lab  # one lab, named once
    job = job_spec(TMP, topology, args)
    parsed = shlex.split(launcher.render(job), comments=True)
    i = 0
    for host in lab.nodes:
        env, i = read_env(parsed, i)
        assert env["GLOO_SOCKET_IFNAME"] == netlab.INTERFACE
        if host.rank >= topology.nodes:  # a neighbour: its own one-node job
            assert parsed[i:i + len(netns.RESTART)] == netns.RESTART
            i += len(netns.RESTART)
        wrap = host.wrap([])
        assert parsed[i:i + len(wrap)] == wrap
        i += len(wrap)
        in_job = host.rank < topology.nodes
        node = job.nodes[host.rank] if in_job else netns.neighbour(
            job, host.rank, netns.neighbours_results(job))
        master = lab.master_addr if in_job else host.address
        argv = contract.torchrun_argv(node, master_addr=master, master_port=node.master_port,
                                      store_bind=master, results=str(node.results.resolve()))
        assert parsed[i:i + len(argv)] == argv
        check_torchrun(argv, node)
        i += len(argv)
    assert i == len(parsed)


@given(topology=TOPOLOGY, args=ARGS, on_gpus=st.booleans())
@example(topology=UNEVEN, args=("--steps", "1"), on_gpus=True)
def test_compose_lines_parse_back_to_each_nodes_spec(topology, args, on_gpus):
    visible = tuple(str(i) for i in range(topology.devices))
    options = compose.ComposeOptions(image="bench-trainer:cpu", env_file=EXAMPLE_ENV,
                                     profile="gpu" if on_gpus else "cpu", visible_gpus=visible)
    launcher = compose.ComposeLauncher(options)
    job = job_spec(TMP, topology, args)
    parsed = shlex.split(launcher.render(job), comments=True)
    blocks = gpus.assign(topology, list(visible)) if on_gpus else [None] * topology.nodes
    service = "trainer" if on_gpus else "trainer-cpu"
    i = 0
    for node, block in zip(job.nodes, blocks, strict=True):
        assert parsed[i:i + 3] == ["cd", str(REPO), "&&"]
        env, i = read_env(parsed, i + 3)
        check_contract_env(env, node.__class__(**{**_fields(node), "devices": block}))
        assert "MASTER_ADDR" not in env and env["MASTER_PORT"] == "29500"  # the settings'
        up = ["docker", "compose", "-f", str(compose.COMPOSE_FILE), "--env-file", str(EXAMPLE_ENV),
              "--profile", options.profile, "-p", f"bench-{JOB_ID}-node{node.rank}".lower(),
              "up", "--no-log-prefix", "--exit-code-from", service, service]
        assert parsed[i:i + len(up)] == up
        i += len(up)
    assert i == len(parsed)


def _fields(node: contract.NodeSpec) -> dict:
    return {name: getattr(node, name) for name in node.__dataclass_fields__}


@given(topology=TOPOLOGY, args=ARGS, runtime=st.sampled_from(["native", "compose"]))
@example(topology=UNEVEN, args=("--steps", "1"), runtime="compose")
def test_ssh_lines_parse_back_to_each_nodes_spec(topology, args, runtime):
    hosts = tuple(f"user@127.0.0.{i + 2}" for i in range(topology.nodes))
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(os, "environ", {"PATH": "/usr/bin"})
        launcher = ssh.SshLauncher(ssh.SshOptions(hosts=hosts, runtime=runtime,
                                                  remote_dir="/srv/b", image="bench:cpu",
                                                  results_root=TMP))
        job = job_spec(TMP, topology, args)
        rendered = launcher.render(job)
    parsed = shlex.split(rendered.split("\n# afterwards, on every host:\n")[0], comments=True)
    base = ssh.ssh_base()
    i = 0
    for node, host in zip(job.nodes, hosts, strict=True):
        assert parsed[i:i + len(base) + 2] == [*base, "--", host]
        remote = shlex.split(parsed[i + len(base) + 2])
        i += len(base) + 3
        assert remote[:4] == ["cd", "/srv/b", "&&", "exec"]
        env, start = read_env(remote, 4)
        if runtime == "native":
            assert env == {}
            argv = contract.torchrun_argv(node, master_addr=host_address(hosts[0]),
                                          master_port=29500, python="/srv/b/.venv/bin/python")
            assert remote[start:] == argv
            check_torchrun(argv, node)
        else:
            check_contract_env(env, node)
            assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.2", "29500")
            assert remote[start:start + 5] == ["sh", "-c", compose.REMOTE_UP, "bench-node",
                                               "bench:cpu"]
    assert i == len(parsed)


@given(topology=TOPOLOGY, args=ARGS, runtime=st.sampled_from(["native", "compose", "pyxis"]),
       pick=st.integers(0, 3))
@example(topology=UNEVEN, args=("--steps", "1"), runtime="native", pick=2)
def test_the_slurm_task_holds_each_nodes_spec_and_runs_its_own(topology, args, runtime, pick):
    options = slurm.SlurmOptions(runtime=runtime, remote_dir="/srv/b",
                                 image=None if runtime == "native" else "bench:cpu",
                                 results_root=TMP)
    job = job_spec(TMP, topology, args)
    text = slurm.script(options, job)
    srun = shlex.split(text.split("A task that fails stops the rest.\n", 1)[1])
    start = srun.index("bench-task") + 1
    assert srun[start - 4:start] == ["bash", "-c", slurm.TASK, "bench-task"]
    groups, i = [], start
    while i < len(srun):  # the task's own format: a count, then that many words
        count = int(srun[i])
        groups.append(srun[i + 1:i + 1 + count])
        i += 1 + count
    assert len(groups) == 2 * topology.nodes
    for node in job.nodes:
        main, cleanup = groups[2 * node.rank], groups[2 * node.rank + 1]
        if runtime == "compose":
            env, at = read_env(main, 0)
            check_contract_env(env, node)
            # The rendezvous is the batch script's: left to the task's environment.
            assert "MASTER_ADDR" not in env and "MASTER_PORT" not in env
            assert main[at:at + 5] == ["sh", "-c", compose.REMOTE_UP, "bench-node", "bench:cpu"]
            assert read_env(cleanup, 0)[0] == env
        else:
            python = "python3" if runtime == "pyxis" else "/srv/b/.venv/bin/python"
            argv = contract.torchrun_argv(node, master_addr=None, master_port=None,
                                          results=str(job.results.resolve()), python=python)
            assert main == argv and cleanup == []
            assert "--master_addr" not in argv[:argv.index("-m", 3)]
            check_torchrun(argv, node)
    # The node Slurm starts it on runs that node's command, word for word.
    node = min(pick, topology.nodes - 1)
    ran = subprocess.run([BASH, "-c", slurm.TASK, "bench-task", *srun[start:]],
                         env={"SLURM_NODEID": str(node), "PATH": "/nonexistent"},
                         capture_output=True, text=True)
    assert f"[bench-slurm] node {node} () exited 127" in ran.stdout
    assert groups[2 * node][0] in ran.stderr  # not found: only the first word is run
