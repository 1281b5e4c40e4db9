"""A slow emulated host on purpose (issue 26): the CPU quota and link rate options, the
cgroup writer against a temporary directory laid out like a cgroup mount, and what each
node's processes are told. The real cgroups and links: tests/test_netlab_e2e.py."""
from __future__ import annotations

import math
import os
import shutil
import subprocess
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import provenance
from bench.host import cgroups, netlab
from bench.host.launchers import netns, registry
from bench.host.launchers.flags import LaunchContext
from bench.options import ConfigError
from bench.topology import Topology

FOUR_HOSTS = LaunchContext(topologies=(Topology(4, 1),))


def _options(environ: dict[str, str] | None = None, **flags: str):
    given_flags = {"--link": "1gbit", **{"--" + k.replace("_", "-"): v for k, v in flags.items()}}
    return registry.options_from("netns", given_flags, FOUR_HOSTS, environ or {})


@pytest.fixture
def two_cpus(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)


# --- the options -----------------------------------------------------------------------------
def test_one_quota_holds_every_host_and_a_list_holds_each_its_own(two_cpus):
    assert netns.quotas_per_host(_options(host_cpu_quota="0.5")) == (0.5,) * 4
    assert netns.quotas_per_host(_options(host_cpu_quota="0.5,0.5,0.5,0.4")) == (
        0.5, 0.5, 0.5, 0.4)
    assert netns.quotas_per_host(_options()) == ()
    # The environment variable is the same setting (what the Makefile and scripts pass).
    assert netns.quotas_per_host(_options({"BENCH_LAUNCHER_HOST_CPU_QUOTA": "0.25"})) == (
        0.25,) * 4


def test_the_lab_of_a_job_gets_each_hosts_quota_and_rate(two_cpus, tmp_path):
    from bench.host.launchers.base import JobSpec

    options = _options(host_cpu_quota="0.5,0.5,0.4,0.5", host_links=",,,100mbit")
    launcher = netns.NetnsLauncher(options)
    job = JobSpec(job_id="j", module="bench.rank.train", workload_args=(),
                  topology=Topology(4, 1), master_port=29500, rdzv_timeout=60,
                  results=tmp_path / "runs.jsonl", log_dir=tmp_path, deadline_s=60)
    lab = launcher.lab(job)
    assert [n.cpu_quota for n in lab.nodes] == [0.5, 0.5, 0.4, 0.5]
    assert [n.rate_bps for n in lab.nodes] == [10**9] * 3 + [10**8]
    node2 = netns.commands(lab, job, tmp_path / "neighbours.jsonl")[2]
    assert node2.env["BENCH_LINK_CPU_QUOTA"] == "0.4"
    assert "host 3 at 100 Mbit/s" in launcher.render(job)


@pytest.mark.parametrize(("text", "says"), [
    ("0", "above 0"), ("-0.5", "above 0"), ("nan", "finite"), ("inf", "finite"),
    ("half", "a fraction of one CPU"), ("", "a fraction of one CPU"),
    ("0.5,,0.5,0.5", "a fraction of one CPU"),
    ("0.5,0.5", "2 quotas for 4 emulated hosts"),
    ("1.5", "0.05-1 CPUs"),          # four hosts on two CPUs: one CPU pinned to each
    ("0.01", "0.05-1 CPUs"),         # below the kernel's least quota (1 ms per period)
])
def test_a_bad_quota_is_refused_naming_the_flag_the_value_and_the_fix(two_cpus, text, says):
    with pytest.raises(ConfigError) as caught:
        _options(host_cpu_quota=text)
    assert caught.value.flag == "--host-cpu-quota" and says in str(caught.value)


def test_a_quota_from_the_environment_is_refused_naming_the_variable(two_cpus):
    with pytest.raises(ConfigError, match="^BENCH_LAUNCHER_HOST_CPU_QUOTA=x"):
        _options({"BENCH_LAUNCHER_HOST_CPU_QUOTA": "x"})


def test_host_links_give_each_host_its_rate_and_an_empty_entry_keeps_the_link(two_cpus):
    assert _options(host_links="1gbit,1gbit,1gbit,100mbit").host_links == (
        10**9, 10**9, 10**9, 10**8)
    assert _options(host_links=",,,100mbit").host_links == (None, None, None, 10**8)
    for text, says in (("1gbit,100mbit", "2 rates for 4 emulated hosts"),
                       (",,,", "a link rate per host"),
                       ("1gbit,fast,1gbit,1gbit", "link rate such as")):
        with pytest.raises(ConfigError, match=f"^--host-links=.*{says}"):
            _options(host_links=text)


def test_the_options_are_netns_only():
    with pytest.raises(ConfigError, match="only with --launcher netns"):
        registry.options_from("native", {"--host-cpu-quota": "0.5"}, FOUR_HOSTS, {})


@given(st.lists(st.floats(min_value=0.05, max_value=1, allow_nan=False), min_size=1,
                max_size=8))
def test_quotas_parse_back_from_their_text(quotas):
    text = ",".join(repr(q) for q in quotas)
    assert netns.parse_quotas(text, "--host-cpu-quota") == tuple(quotas)


@given(st.text(max_size=30))
def test_any_quota_text_parses_to_finite_positive_numbers_or_is_refused(text):
    try:
        quotas = netns.parse_quotas(text, "--host-cpu-quota")
    except ConfigError as error:
        assert error.flag == "--host-cpu-quota"
    else:
        assert quotas and all(math.isfinite(q) and q > 0 for q in quotas)


@given(st.lists(st.sampled_from(["", "1gbit", "100mbit", "5gbit", "2500kbit"]), min_size=1,
                max_size=6).filter(any))
def test_host_links_parse_entry_by_entry(words):
    rates = netns.parse_host_links(",".join(words), "--host-links")
    assert [r is None for r in rates] == [not w for w in words]


# --- each host's CPUs, chosen (--host-cpus) ----------------------------------------------------
def test_host_cpus_place_each_host_and_one_list_holds_every_host(two_cpus):
    assert netns.cpus_per_host(_options(host_cpus="0/0/1/1")) == [[0], [0], [1], [1]]
    assert netns.cpus_per_host(_options(host_cpus="0-1/1,0/0/1")) == [[0, 1], [0, 1], [0], [1]]
    assert netns.cpus_per_host(_options(host_cpus="0")) == [[0]] * 4
    # Without it, the even deal --cpus-per-node makes: four hosts on two CPUs, one each.
    assert netns.cpus_per_host(_options()) == [[0], [1], [0], [1]]
    assert netns.cpus_per_host(_options(cpus_per_node="2")) == [[0, 1]] * 4


def test_the_lab_of_a_job_puts_each_host_on_its_chosen_cpus(two_cpus, tmp_path):
    from bench.host.launchers.base import JobSpec

    launcher = netns.NetnsLauncher(_options(host_cpus="0/0/1/1"))
    job = JobSpec(job_id="j", module="bench.rank.train", workload_args=(),
                  topology=Topology(2, 1), master_port=29500, rdzv_timeout=60,
                  results=tmp_path / "runs.jsonl", log_dir=tmp_path, deadline_s=60)
    lab = launcher.lab(job)
    assert [node.cpus for node in lab.nodes] == [[0], [0], [1], [1]]
    # Each node's command (the job's two, then the two neighbours) runs on its CPUs.
    pinned = [c.argv[c.argv.index("taskset") + 2]
              for c in netns.commands(lab, job, tmp_path / "neighbours.jsonl")]
    assert pinned == ["0", "0", "1", "1"]
    assert "host 0: 0, host 1: 0, host 2: 1, host 3: 1" in launcher.render(job)


@pytest.mark.parametrize("text, says", [
    ("", "a CPU list per host"), ("0//1", "a CPU list per host"), ("-1", "a CPU list"),
    ("a", "a CPU list"), ("0 1", "a CPU list"), ("2", "0-1"), ("1-0", "a range low-high"),
    ("0-9999", "0-1"), ("0/1", "2 CPU lists for 4 emulated hosts"), ("٣", "a CPU list")])
def test_a_bad_host_cpus_is_refused_naming_the_flag_the_value_and_the_fix(two_cpus, text,
                                                                         says):
    with pytest.raises(ConfigError) as caught:
        _options(host_cpus=text)
    assert caught.value.flag == "--host-cpus" and says in str(caught.value), caught.value
    assert "e.g. 0/0/1/1" in str(caught.value)


def test_host_cpus_and_cpus_per_node_are_not_given_together(two_cpus):
    with pytest.raises(ConfigError, match="give it or --cpus-per-node, not both"):
        _options(host_cpus="0/0/1/1", cpus_per_node="1")


def test_a_quota_is_checked_against_its_own_hosts_cpus(two_cpus):
    _options(host_cpus="0-1/0/0/1", host_cpu_quota="2,1,1,1")
    with pytest.raises(ConfigError, match="each quota must be in 0.05-1 CPUs"):
        _options(host_cpus="0-1/0/0/1", host_cpu_quota="2,2,1,1")


@given(st.lists(st.lists(st.integers(0, 1), min_size=1, max_size=3), min_size=1, max_size=6))
def test_host_cpus_parse_back_from_their_text(hosts):
    text = "/".join(",".join(map(str, cpus)) for cpus in hosts)
    # mock, not monkeypatch: a function-scoped fixture is not reset between @given examples.
    with mock.patch.object(os, "cpu_count", return_value=2):
        assert netns.parse_host_cpus(text, "--host-cpus") == tuple(
            tuple(sorted(set(cpus))) for cpus in hosts)


@given(st.text(max_size=30))
def test_any_host_cpus_text_parses_to_the_machines_cpus_or_is_refused(text):
    try:
        hosts = netns.parse_host_cpus(text, "--host-cpus")
    except ConfigError as error:
        assert error.flag == "--host-cpus"
    else:
        total = os.cpu_count() or 1
        assert hosts and all(cpus and all(0 <= c < total for c in cpus) for cpus in hosts)


def test_hosts_sharing_a_cpu_are_told_their_share_of_it(two_cpus):
    # Two hosts on CPU 0, one alone on CPU 1: half a CPU each for the two, all of it alone.
    lab = netlab.Lab(3, 10**9, node_cpus=[[0], [0], [1]])
    assert [lab.env(node)["BENCH_LINK_CPU_SHARE"] for node in lab.nodes] == ["0.5", "0.5", "1"]
    assert lab.cpu_share == 0.5
    # Both hosts of a two-host lab on one CPU: half each, where the even deal gives one each.
    assert netlab.Lab(2, 10**9, node_cpus=[[0], [0]]).cpu_share == 0.5
    assert netlab.Lab(2, 10**9).cpu_share == 1.0
    # The even deal spelled out is the even deal.
    assert netlab.Lab(4, 10**9, node_cpus=[[0], [1], [0], [1]]).cpu_share == 0.5
    quota = netlab.Lab(2, 10**9, node_cpus=[[0], [0]], cpu_quotas=[0.3, None])
    assert [quota.share_of(node) for node in quota.nodes] == [0.3, 0.5]


def test_a_lab_refuses_cpu_sets_that_do_not_fit(two_cpus):
    with pytest.raises(netlab.LabError, match="1 CPU set"):
        netlab.Lab(2, 10**9, node_cpus=[[0]])
    with pytest.raises(netlab.LabError, match="one of this machine's 0-1"):
        netlab.Lab(2, 10**9, node_cpus=[[0], [2]])
    with pytest.raises(netlab.LabError, match="at least one"):
        netlab.Lab(2, 10**9, node_cpus=[[0], []])
    with pytest.raises(netlab.LabError, match="give one"):
        netlab.Lab(2, 10**9, cpus_per_node=1, node_cpus=[[0], [1]])
    with pytest.raises(netlab.LabError, match="its pinned CPUs"):
        netlab.Lab(2, 10**9, node_cpus=[[0], [1]], cpu_quotas=[1.5, None])


# --- the lab and what its nodes are told -------------------------------------------------------
def test_each_node_is_told_its_own_rate_quota_and_share(two_cpus):
    lab = netlab.Lab(4, 10**9, node_rates=[None, None, None, 10**8],
                     cpu_quotas=[0.5, 0.5, 0.4, None])
    envs = [lab.env(node) for node in lab.nodes]
    assert [e["BENCH_LINK_RATE"] for e in envs] == ["1gbit"] * 3 + ["100mbit"]
    assert [e.get("BENCH_LINK_CPU_QUOTA") for e in envs] == ["0.5", "0.5", "0.4", None]
    # Four hosts on two CPUs: half a CPU each; a quota below that is the host's share.
    assert [e["BENCH_LINK_CPU_SHARE"] for e in envs] == ["0.5", "0.5", "0.4", "0.5"]
    assert "node 3 at 100 Mbit/s" in lab.describe() and "node 2 held to 0.4" in lab.describe()


def test_a_lab_refuses_a_quota_or_rate_per_node_that_does_not_fit(two_cpus):
    with pytest.raises(netlab.LabError, match="3 CPU quota"):
        netlab.Lab(4, 10**9, cpu_quotas=[0.5] * 3)
    with pytest.raises(netlab.LabError, match="its pinned CPUs"):
        netlab.Lab(4, 10**9, cpu_quotas=[0.5, 0.5, 0.5, 2.0])
    with pytest.raises(netlab.LabError, match="2 link rate"):
        netlab.Lab(4, 10**9, node_rates=[10**9, 10**8])


def test_the_record_carries_the_quota_only_when_it_is_one(monkeypatch):
    monkeypatch.setenv("BENCH_LINK_RATE", "1gbit")
    for value, quota in (("0.4", 0.4), ("0", None), ("nan", None), ("x", None), ("", None)):
        monkeypatch.setenv("BENCH_LINK_CPU_QUOTA", value)
        assert provenance.link().get("cpu_quota") == quota


def test_a_capped_node_joins_its_cgroup_before_entering_its_namespace(tmp_path):
    node = netlab.Node(1, "ns1", "169.254.100.2", [1], 10**9, 0.25, tmp_path / "cg")
    argv = node.wrap(["python3", "-c", "print(1)"])
    # ip netns exec mounts a fresh /sys, which hides the cgroup mount: join first.
    assert argv.index(str(tmp_path / "cg" / "cgroup.procs")) < argv.index("ip")
    assert argv[-3:] == ["python3", "-c", "print(1)"]
    node.cgroup = None
    assert node.wrap(["true"])[:2] == ["ip", "netns"]


def test_the_join_writes_its_own_pid_then_runs_the_command_unparsed(tmp_path):
    cgroup = tmp_path / "cg"
    cgroup.mkdir()
    odd = "a b;$(echo no)'\""
    out = subprocess.run(cgroups.join_argv(cgroup, ["sh", "-c", 'echo "$$ $1"', "x", odd]),
                         capture_output=True, text=True, check=True).stdout
    pid, echoed = out.rstrip("\n").split(" ", 1)
    assert echoed == odd   # one argument, as given
    assert (cgroup / "cgroup.procs").read_text() == f"{pid}\n"   # the same process


# --- the cgroup writer, on a directory laid out like a mount ----------------------------------
def _v1(root: Path) -> Path:
    cpu = root / "cpu"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("-1\n")
    return cpu


def _v2(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("memory\n")
    return root


def test_v1_a_quota_is_the_cfs_quota_per_period(tmp_path):
    _v1(tmp_path)
    mount = cgroups.find_mount(tmp_path)
    assert mount == cgroups.Mount(1, tmp_path / "cpu")
    path = cgroups.create(mount, "benchlab-1-abc-n2", 0.4)
    assert (path / "cpu.cfs_period_us").read_text() == "20000\n"
    assert (path / "cpu.cfs_quota_us").read_text() == "8000\n"


def test_v2_a_quota_is_cpu_max_and_the_parent_enables_the_controller(tmp_path):
    _v2(tmp_path)
    mount = cgroups.find_mount(tmp_path)
    assert mount == cgroups.Mount(2, tmp_path)
    path = cgroups.create(mount, "benchlab-1-abc-n0", 0.25)
    assert (path / "cpu.max").read_text() == "5000 20000\n"
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"


def test_a_hybrid_machine_uses_its_v1_cpu_hierarchy(tmp_path):
    _v1(tmp_path)
    (tmp_path / "cgroup.controllers").write_text("\n")   # the unified tree, no cpu in it
    assert cgroups.find_mount(tmp_path).version == 1


def test_no_cpu_controller_is_one_clear_error(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    with pytest.raises(cgroups.CgroupError, match="without --host-cpu-quota"):
        cgroups.find_mount(tmp_path)


def _fake_rmdir(path: Path) -> None:
    """A cgroup directory's control files vanish with it; a plain directory's do not."""
    if cgroups.pids(path):
        raise OSError(16, "Device or resource busy")
    shutil.rmtree(path)


def test_stale_cgroups_of_dead_owners_are_removed_and_live_ones_kept(tmp_path):
    mount = cgroups.find_mount(_v2(tmp_path))
    dead = subprocess.Popen(["true"])
    dead.wait()
    for name in (f"benchlab-{dead.pid}-aaaaaa-n0", f"benchlab-{os.getpid()}-bbbbbb-n0",
                 "someone-elses"):
        cgroups.create(mount, name, 0.5)
    removed = cgroups.clean_stale(netlab._OWNED, netlab._pid_alive, root=tmp_path,
                                  rmdir=_fake_rmdir)
    assert removed == [f"benchlab-{dead.pid}-aaaaaa-n0"]
    left = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert left == [f"benchlab-{os.getpid()}-bbbbbb-n0", "someone-elses"]
    assert cgroups.clean_stale(netlab._OWNED, netlab._pid_alive, everything=True,
                               root=tmp_path, rmdir=_fake_rmdir) == [
        f"benchlab-{os.getpid()}-bbbbbb-n0"]


def test_removal_ends_a_process_left_in_the_cgroup_first(tmp_path):
    mount = cgroups.find_mount(_v2(tmp_path))
    path = cgroups.create(mount, "benchlab-1-a-n0", 1)
    straggler = subprocess.Popen(["sleep", "60"])
    try:
        (path / "cgroup.procs").write_text(f"{straggler.pid}\n")
        assert cgroups.remove(mount, path, rmdir=_kernel_like_rmdir(straggler))
        assert straggler.wait(timeout=5) == -9 and not path.exists()
    finally:
        if straggler.poll() is None:
            straggler.kill()


def _kernel_like_rmdir(member: subprocess.Popen):
    def rmdir(path: Path) -> None:
        if member.poll() is None:
            raise OSError(16, "Device or resource busy")
        shutil.rmtree(path)
    return rmdir


def test_a_failed_write_names_the_file_and_the_value(tmp_path):
    cpu = _v1(tmp_path)
    (cpu / "benchlab-1-a-n0").mkdir()
    with pytest.raises(cgroups.CgroupError, match="creating the cgroup"):
        cgroups.create(cgroups.find_mount(tmp_path), "benchlab-1-a-n0", 0.5)


def test_only_a_cgroup_directly_under_the_mount_is_removed_or_emptied(tmp_path):
    """remove() kills what is in the cgroup and deletes it: a path that resolves anywhere
    else (a link, a nested or outside directory) is refused before anything happens."""
    mount = cgroups.find_mount(_v2(tmp_path / "cg"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (mount.base / "benchlab-1-a-n0").symlink_to(elsewhere)
    nested = mount.base / "a" / "benchlab-1-a-n1"
    nested.mkdir(parents=True)
    for bad in (mount.base / "benchlab-1-a-n0", nested, elsewhere, mount.base,
                mount.base / "x" / ".." / ".."):
        with pytest.raises(cgroups.CgroupError, match="nothing was removed"):
            cgroups.remove(mount, bad, rmdir=_fake_rmdir)
    assert elsewhere.is_dir() and nested.is_dir()
    for bad_name in ("", ".", "..", "a/b"):
        with pytest.raises(cgroups.CgroupError, match="one path component"):
            mount.path(bad_name)
