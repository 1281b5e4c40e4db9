"""The checks `bench doctor` and the launchers' preflight share (bench.host.checks), each
on its own against scripted command output, and the promise that joins them: for the same
condition a launcher's preflight and `bench doctor` say the same row."""
from __future__ import annotations

import functools
import io
import subprocess
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.host import doctor, netlab
from bench.host.checks import (
    FAIL,
    PASS,
    WARN,
    Row,
    containers,
    data,
    gpu,
    network,
    preflight,
    table,
    tally,
)
from bench.host.checks import remote as remote_module
from bench.host.checks import slurm as slurm_checks
from bench.host.checks import ssh as ssh_checks
from bench.host.checks.remote import Hosts, Remote
from bench.host.launchers import k8s
from bench.host.launchers.compose import ComposeLauncher, ComposeOptions
from bench.host.launchers.k8s import preflight as k8s_preflight
from bench.host.launchers.netns import NetnsLauncher, NetnsOptions
from bench.host.launchers.slurm import SlurmLauncher, SlurmOptions
from bench.host.launchers.ssh import SshLauncher, SshOptions, ssh_argv, ssh_base
from bench.topology import Topology
from conftest import EXAMPLE_ENV

REFUSED = "ssh: connect to host 10.0.0.9 port 22: Connection refused"


def done(code: int = 0, out: str = "", err: str = "") -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess([], code, out, err)


class Scripted:
    """A remote answering each command from a script: the first key found in the line."""

    def __init__(self, answers: dict[str, subprocess.CompletedProcess] | None = None,
                 default: subprocess.CompletedProcess | None = None):
        self.answers, self.default = answers or {}, default
        self.commands: list[tuple[str, str, float | None]] = []

    def run(self, host: str, command: str, timeout: float | None = None):
        self.commands.append((host, command, timeout))
        for key, answer in self.answers.items():
            if key in command:
                return answer
        if self.default is None:
            raise AssertionError(f"unexpected command {command}")
        return self.default


def hosts(remote, names=("h1", "h2"), **kw) -> Hosts:
    return Hosts(tuple(names), remote, image="bench-trainer:cpu", **kw)


# --- ssh: reachability, resolve, clock ----------------------------------------------------------
@pytest.mark.parametrize("out, result, words", [
    (done(0), PASS, "passwordless"),
    (done(124, err="no answer in 30 s"), FAIL, "no answer in 30 s: is the host up"),
    (done(255, err="Host key verification failed."), FAIL, "ssh-keyscan h1"),
    (done(255, err="root@h1: Permission denied (publickey)."), FAIL, "ssh-copy-id h1"),
    (done(255, err="ssh: Could not resolve hostname h1"), FAIL, "h1 does not resolve"),
    (done(255, err=REFUSED), FAIL, "start sshd on h1"),
    (done(255), FAIL, "exit 255; start sshd"),
])
def test_the_ssh_row_reads_what_ssh_said(out, result, words):
    row = ssh_checks.ssh_row("h1", out)
    assert (row.host, row.check, row.result) == ("h1", "ssh", result) and words in row.detail


def test_reach_runs_true_within_the_first_contact_limit():
    remote = Scripted({"true": done(0)})
    assert ssh_checks.reach(remote, "h1").result == PASS
    assert remote.commands == [("h1", "true", ssh_checks.SSH_PROBE_S)]


def test_resolve_names_the_hosts_that_do_not_resolve():
    missing = Scripted({"getent": done(0, "h2\n")})
    row = ssh_checks.resolve_row(hosts(missing, ("root@h1", "h2")), "h1")
    assert row.result == FAIL and "cannot resolve h2" in row.detail
    assert "root@" not in missing.commands[0][1]  # the address, not the ssh login
    assert ssh_checks.resolve_row(hosts(Scripted({"getent": done(0)})), "h1").result == PASS


@pytest.mark.parametrize("skew, result", [(0.0, PASS), (2.0, WARN), (-9.0, FAIL)])
def test_the_clock_row_judges_the_skew(skew, result):
    row = ssh_checks.clock_row(Scripted({"date": done(0, f"{time.time() + skew:.3f}")}), "h1")
    assert row.result == result and row.check == "clock"


@pytest.mark.parametrize("said", ["", "garbage", "nan"])
def test_an_unreadable_clock_fails(said):
    row = ssh_checks.clock_row(Scripted({"date": done(0, said)}), "h1")
    assert row.result == FAIL


# --- containers: docker, image, same image ----------------------------------------------------
def test_the_docker_row():
    assert containers.docker_row(Scripted(default=done(0)), "h1").result == PASS
    row = containers.docker_row(Scripted(default=done(1)), "h1")
    assert row.result == FAIL and "scripts/install-host.sh docker" in row.detail


def test_the_image_row_reports_its_id_and_versions():
    remote = Scripted({"inspect": done(0, "sha256:" + "a" * 64 + "\n"),
                       "docker run": done(0, "2.14.1 None None\n")})
    row, found = containers.image_row(remote, "h1", "bench-trainer:cpu")
    assert row.result == PASS and "torch/CUDA/NCCL 2.14.1 None None" in row.detail
    assert found == ("sha256:" + "a" * 64, "2.14.1 None None")


def test_a_missing_image_is_named_on_its_host_and_no_container_starts():
    remote = Scripted({"inspect": done(1, err="No such image")})
    row, found = containers.image_row(remote, "h2", "bench-trainer:x")
    assert found is None and row.result == FAIL
    assert row.detail.startswith("image bench-trainer:x missing on h2")
    assert len(remote.commands) == 1


def test_different_images_fail_on_every_host_that_has_one():
    assert containers.same_image_rows({"h1": ("a", "v"), "h2": ("a", "v"), "h3": None}) == []
    rows = containers.same_image_rows({"h1": ("a", "v"), "h2": ("b", "v"), "h3": None})
    assert [(r.host, r.result) for r in rows] == [("h1", FAIL), ("h2", FAIL)]


def test_the_local_image_row(monkeypatch):
    answers = iter([done(0, "sha256:abc\n"), done(1, err="No such image")])
    monkeypatch.setattr(containers.subprocess, "run", lambda argv, **kw: next(answers))
    assert containers.local_image_row("bench-trainer:cpu").result == PASS
    row = containers.local_image_row("bench-trainer:x")
    assert row == Row("local", "image", FAIL, "--image=bench-trainer:x: no such image here: "
                      "build it with `make build` (GPU) or `make build-cpu`")


# --- gpu: the count on a host (the driver and probe: tests/test_doctor_gpu.py) ------------------
@pytest.mark.parametrize("said, wanted, result, words", [
    ("", 4, PASS, "a CPU host"),
    ("0\n", 4, PASS, "a CPU host"),
    ("4\n", 4, PASS, "4 GPU(s)"),
    ("2\n", 4, FAIL, "--topologies=...x4: host h2 has 2 GPU(s): at most 2x2 there"),
    ("NVIDIA-SMI has failed", 1, FAIL, "unexpected GPU count"),
])
def test_the_gpu_count_row(said, wanted, result, words):
    row = gpu.gpu_count_row("h2", 1, done(0, said), wanted)
    assert row.result == result and row.check == "gpus" and words in row.detail


@given(said=st.text(max_size=40), wanted=st.integers(0, 64))
def test_the_gpu_count_row_reads_any_answer(said, wanted):
    """Whatever nvidia-smi printed, one row; a plain count passes when it is enough."""
    row = gpu.gpu_count_row("h1", 0, done(0, said), wanted)
    text = said.strip() or "0"
    fits = text.isdigit() and (int(text) == 0 or int(text) >= wanted)
    assert row.result == (PASS if fits else FAIL)


# --- network: interface, exposure, rendezvous --------------------------------------------------
def test_no_route_to_the_master_is_one_failure():
    rows, devices = network.interface_rows(hosts(Scripted({"ip route": done(0, "")})), "h1")
    assert [r.result for r in rows] == [FAIL] and devices == []


@pytest.mark.parametrize("settings, link, results, devices", [
    ({}, 0, [WARN, WARN], ["eth0"]),
    ({"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}, 0, [PASS, PASS], ["eth0"]),
    ({"NCCL_SOCKET_IFNAME": "eth9", "GLOO_SOCKET_IFNAME": "eth0"}, 1, [FAIL, FAIL], []),
    ({"NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "eth0"}, 0, [FAIL, PASS],
     ["ib0", "eth0"]),
])
def test_the_interface_rows(settings, link, results, devices):
    remote = Scripted({"ip route": done(0, "dev eth0\n"), "ip link": done(link)})
    rows, used = network.interface_rows(hosts(remote, settings=settings), "h1")
    assert [r.result for r in rows] == results and used == devices


class Listener:
    def __init__(self, said: str):
        self.stdout, self.killed = io.StringIO(said), False

    def kill(self) -> None:
        self.killed = True

    def wait(self) -> int:
        return 0


class Rendezvous(Scripted):
    def __init__(self, said: str, tcp: int):
        super().__init__({"/dev/tcp": done(tcp)})
        self.listener = Listener(said)

    def start(self, host: str, command: str) -> Listener:
        return self.listener


@pytest.mark.parametrize("said, tcp, result", [("listening\n", 0, PASS), ("listening\n", 1, FAIL),
                                              ("", 0, FAIL)])
def test_the_rendezvous_rows(said, tcp, result):
    remote = Rendezvous(said, tcp)
    job = Hosts(("h1", "h2"), remote, master_port=29511)  # type: ignore[arg-type]
    rows = network.rendezvous_rows(job, ["h1", "h2"])
    assert [r.result for r in rows] == [result, result] and remote.listener.killed
    assert "29511" in rows[0].detail
    assert network.rendezvous_rows(job, ["h2"]) == []  # the first host leads


# --- data: shm and the dataset -----------------------------------------------------------------
@pytest.mark.parametrize("said, result", [("8388608\n", PASS), ("524288\n", FAIL), ("", FAIL)])
def test_the_shm_row(said, result):
    assert data.shm_row(Scripted({"df": done(0, said)}), "h1").result == result


def test_the_dataset_row():
    assert data.dataset_row(hosts(Scripted()), "h1").result == WARN  # no volume set
    volume = {"DATA_MOUNT_TYPE": "nfs", "DATA_MOUNT_OPTIONS": "addr=10.0.0.5",
              "DATA_DEVICE": ":/export"}
    ok = Scripted({"dataset verify": done(0, "fashion-mnist: 16 files match\n")})
    assert data.dataset_row(hosts(ok, settings=volume), "h1") == Row(
        "h1", "dataset", PASS, "fashion-mnist: 16 files match")
    bad = Scripted({"dataset verify": done(1, err="mount failed: no such export\n")})
    assert data.dataset_row(hosts(bad, settings=volume), "h1").detail == \
        "mount failed: no such export"


# --- slurm: controller, partition, nodes, munge --------------------------------------------------
def scripted_slurm(monkeypatch, answers: dict[str, subprocess.CompletedProcess],
                   default: subprocess.CompletedProcess | None = None) -> None:
    """slurm's commands answered by the first argv word(s) in ``answers``."""
    def run(argv, timeout):
        for key, answer in answers.items():
            if " ".join(argv).startswith(key):
                return answer
        if default is None:
            raise AssertionError(f"unexpected command {argv}")
        return default
    monkeypatch.setattr(slurm_checks, "_run", run)


@pytest.mark.parametrize("answer, result", [(done(0, "Slurmctld(primary) at c0 is UP\n"), PASS),
                                            (done(1, err="Slurmctld at c0 is DOWN"), FAIL),
                                            (done(127, err="scontrol: not installed"), FAIL)])
def test_the_controller_row(monkeypatch, answer, result):
    scripted_slurm(monkeypatch, {"scontrol ping": answer})
    row = slurm_checks.controller_row(5)
    assert row.result == result
    if answer.returncode == 127:  # no client commands: nothing to start, something to install
        assert "slurm-client" in row.detail and "start slurmctld" not in row.detail


@pytest.mark.parametrize("answer, result, listed", [(done(0, "debug* up\n"), PASS, True),
                                                    (done(0, "debug down\n"), FAIL, True),
                                                    (done(0, ""), FAIL, False)])
def test_the_partition_row(monkeypatch, answer, result, listed):
    scripted_slurm(monkeypatch, {"sinfo": answer})
    row, found = slurm_checks.partition_row("debug", 5)
    assert (row.result, found) == (result, listed)


def test_the_node_rows(monkeypatch):
    scripted_slurm(monkeypatch, {"sinfo": done(0, "c1 idle\nc2 drain\nc1 idle\n")})
    rows, names = slurm_checks.node_rows(None, 5)
    assert [r.result for r in rows] == [PASS, FAIL, PASS] and names == ["c1", "c2"]


# --- preflight: the list, and how it fails -----------------------------------------------------
def test_require_prints_the_table_on_stderr_when_nothing_fails(capsys):
    rows = [Row("h1", "ssh", PASS, "passwordless"), Row("k8s", "nfs", FAIL, "refused")]
    preflight.require(rows, advisory=("nfs",))
    err = capsys.readouterr().err.splitlines()
    assert err == [preflight.PREFIX + line for line in table(rows).splitlines()]
    preflight.require([])
    assert capsys.readouterr().err == ""


def test_require_raises_the_first_failing_row_as_one_line(capsys):
    rows = [Row("h1", "ssh", PASS, "ok"), Row("h2", "ssh", FAIL, "refused; start sshd on h2"),
            Row("h3", "ssh", FAIL, "later")]
    with pytest.raises(RuntimeError) as error:
        preflight.require(rows)
    assert str(error.value) == "h2 ssh: refused; start sshd on h2"
    assert capsys.readouterr().err == ""  # the one error line is the matrix's to print


def test_the_netns_row(monkeypatch):
    def refuse() -> None:
        raise netlab.LabError("network namespaces need root: run as root (CI does)")
    monkeypatch.setattr(netlab, "check_prerequisites", refuse)
    assert preflight.netns() == [Row("local", "netns", FAIL, "network namespaces need root: "
                                     "run as root (CI does)")]
    monkeypatch.setattr(netlab, "check_prerequisites", lambda: None)
    assert preflight.netns()[0].result == PASS


def test_the_ssh_preflight_is_one_ssh_call_per_host():
    remote = Scripted({"nvidia-smi -L": done(0, "2\n")})
    rows = preflight.ssh(remote, ["h1", "h2"], [Topology(2, 2), Topology(1, 1)])
    assert [(r.host, r.check, r.result) for r in rows] == [
        ("h1", "ssh", PASS), ("h1", "gpus", PASS), ("h2", "ssh", PASS), ("h2", "gpus", PASS)]
    assert [host for host, _, _ in remote.commands] == ["h1", "h2"]


@given(st.lists(st.tuples(*[st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"),
                                                    blacklist_characters="|"), max_size=30)] * 2,
                          st.sampled_from([PASS, WARN, FAIL]),
                          st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"),
                                                blacklist_characters="|"), max_size=60)),
                min_size=1, max_size=6))
def test_the_table_has_a_line_per_row_holding_its_cells(cells):
    """One renderer for doctor and preflight: two header lines, then one line per row."""
    rows = [Row(*c) for c in cells]
    lines = table(rows).splitlines()
    assert len(lines) == len(rows) + 2
    for row, line in zip(rows, lines[2:], strict=True):
        found = [cell.strip() for cell in line.strip()[1:-1].split("|")]
        assert found == [row.host.strip(), row.check.strip(), row.result, row.detail.strip()]
    assert tally(rows).startswith(f"{sum(r.result == FAIL for r in rows)} FAIL")


# --- the same condition, the same row: a launcher's preflight and bench doctor -----------------
def over_ssh(monkeypatch, answer: subprocess.CompletedProcess) -> Remote:
    """The real Remote (the ssh launcher's argv) with every ssh call answered by ``answer``."""
    monkeypatch.setattr(remote_module.subprocess, "run", lambda argv, **kw: answer)
    return Remote(functools.partial(ssh_argv, ssh_base(None)))


def test_an_unreachable_host_is_the_same_row_in_doctor_and_the_ssh_preflight(monkeypatch):
    remote = over_ssh(monkeypatch, done(255, err=REFUSED))
    doctor_rows = doctor.check_hosts(Hosts(("h1", "h2"), remote))
    preflight_rows = preflight.ssh(remote, ["h1", "h2"], [Topology(2, 1)])
    assert preflight_rows == doctor_rows == [ssh_checks.ssh_row(h, done(255, err=REFUSED))
                                             for h in ("h1", "h2")]
    options = SshOptions(hosts=("h1", "h2"), runtime="native", remote_dir="/srv/bench")
    with pytest.raises(RuntimeError) as error:
        SshLauncher(options).preflight([Topology(2, 1)])
    first = doctor_rows[0]
    assert str(error.value) == f"h1 ssh: {first.detail}"


@pytest.mark.parametrize("answers, check", [
    ({"scontrol ping": done(1, err="slurm_load_ctl_conf error: Unable to contact slurm "
                                   "controller")}, "controller"),
    ({"scontrol ping": done(0, "Slurmctld(primary) at c0 is UP\n"), "sinfo": done(0, "")},
     "partition"),
    ({"scontrol ping": done(0, "Slurmctld(primary) at c0 is UP\n"),
      "sinfo": done(0, "gpu down\n")}, "partition"),
])
def test_a_slurm_failure_is_the_same_row_in_doctor_and_the_slurm_preflight(
        monkeypatch, tmp_path, answers, check):
    scripted_slurm(monkeypatch, answers, default=done(1, err="not here"))
    doctor_rows = slurm_checks.check("gpu", "native", None, None, timeout=5)
    ours = preflight.slurm("gpu")
    failed = next(r for r in doctor_rows if r.result == FAIL)
    assert failed.check == check and failed in ours and ours == doctor_rows[:len(ours)]
    launcher = SlurmLauncher(SlurmOptions(partition="gpu", results_root=tmp_path))
    with pytest.raises(RuntimeError) as error:
        launcher.preflight([Topology(1, 1)])
    assert str(error.value) == f"slurm {check}: {failed.detail}"


def test_a_kubernetes_context_that_does_not_answer_is_the_same_row(monkeypatch, capsys):
    said = done(1, err="The connection to the server localhost:8080 was refused")
    monkeypatch.setattr(k8s_preflight, "kubectl", lambda *a, **kw: said)
    options = k8s.K8sOptions(image="bench-trainer:cpu", env_file=EXAMPLE_ENV)
    (row,) = k8s.cluster_checks(options)
    assert row.check == "context" and row.result == FAIL
    with pytest.raises(RuntimeError) as error:
        k8s.K8sLauncher(options).preflight([Topology(2, 1)])
    assert str(error.value) == f"k8s context: {row.detail}"


def test_a_missing_image_is_the_compose_preflight_row(monkeypatch):
    monkeypatch.setattr(containers.subprocess, "run", lambda argv, **kw: done(1))
    row = containers.local_image_row("bench-trainer:x")
    launcher = ComposeLauncher(ComposeOptions(image="bench-trainer:x", env_file=EXAMPLE_ENV,
                                              profile="cpu"))
    with pytest.raises(RuntimeError) as error:
        launcher.preflight([Topology(1, 1)])
    assert str(error.value) == f"local image: {row.detail}"


def test_netns_without_root_is_its_preflight_row(monkeypatch):
    def refuse() -> None:
        raise netlab.LabError("ip, tc not found: install iproute2 and util-linux")
    monkeypatch.setattr(netlab, "check_prerequisites", refuse)
    launcher = NetnsLauncher(NetnsOptions(link_bps=10**9, cpus_per_node=1, lab_nodes=2))
    with pytest.raises(RuntimeError, match="^local netns: ip, tc not found"):
        launcher.preflight([Topology(2, 1)])
