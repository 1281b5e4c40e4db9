"""Host names and the other list settings: strict patterns, bounds, and ssh's ``--``.

A host is a DNS name, an IPv4 or IPv6 address, optionally behind ``user@``: nothing that
ssh could read as an option (``-oProxyCommand=...``) or a shell as syntax. Every ssh
command line the stack builds ends ssh's options with ``--`` right before the host.
"""
from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest

from bench.host import doctor
from bench.host.checks import network, remote
from bench.host.checks.remote import Hosts, Remote
from bench.host.launchers import ssh
from bench.host.launchers.base import JobSpec
from bench.options import ConfigError
from bench.topology import (
    MAX_NODES,
    MAX_PROCS_PER_NODE,
    Topology,
    check_host,
    host_address,
    parse_hosts,
    parse_list,
    parse_positive_ints,
)
from conftest import EXAMPLE_ENV, REPO

MARKER = "pwned-by-host"

BAD_HOSTS = {
    "proxycommand": f"x,-oProxyCommand=touch${{IFS}}{MARKER}",
    "option only": "-oProxyCommand=sh",
    "dash": "-h",
    "leading dash label": "-node1",
    "semicolon": f"a;touch {MARKER}",
    "command substitution": f"$(touch {MARKER})",
    "backticks": f"`touch {MARKER}`",
    "pipe": "a|b",
    "ampersand": "a&b",
    "redirect": "a>b",
    "quote": "a'b",
    "double quote": 'a"b',
    "space inside": "node 1",
    "tab inside": "node\t1",
    "newline inside": "node1\nnode2",
    "empty": "",
    "blank": "   ",
    "empty item": "a,,b",
    "trailing comma": "a,",
    "dot dot": "..",
    "empty label": "a..b",
    "leading dot": ".a",
    "trailing hyphen label": "node-.lab",
    "label too long": "a" * 64,
    "name too long": ".".join(["a" * 60] * 5),
    "underscore": "node_1",
    "slash": "a/b",
    "port suffix": "node1:22",
    "bracketed ipv6": "[::1]",
    "ipv6 zone": "fe80::1%eth0",
    "ipv4 out of range": "1.2.3.999",
    "ipv4 too few": "256.1.1.1",
    "cyrillic o lookalike": "n\u043ede1",
    "fullwidth h": "\uff48ost",
    "arabic digits": "\u0663.1.1.1",
    "superscript digit": "node\u00b2",
    "zero width space": "node\u200b1",
    "empty user": "@node1",
    "empty host": "root@",
    "two ats": "a@b@c",
    "user with dash first": "-u@node1",
    "user with semicolon": "r;id@node1",
    "duplicate": "node1,node1",
    "duplicate by case": "node1,NODE1",
    "duplicate behind user": "root@node1,node1",
}

GOOD_HOSTS = {
    "names": ("node1,node2", ["node1", "node2"]),
    "fqdn": ("gpu-01.lab.example.org", ["gpu-01.lab.example.org"]),
    "ipv4": ("10.0.0.2,10.0.0.3", ["10.0.0.2", "10.0.0.3"]),
    "loopback": ("127.0.0.2 , 127.0.0.3", ["127.0.0.2", "127.0.0.3"]),
    "ipv6": ("::1,fe80::1", ["::1", "fe80::1"]),
    "user at host": ("root@127.0.0.2,bench.user@node-2", ["root@127.0.0.2",
                                                          "bench.user@node-2"]),
    "single label digits and letters": ("1node", ["1node"]),
    "longest label": ("a" * 63, ["a" * 63]),
}


@pytest.mark.parametrize("text", BAD_HOSTS.values(), ids=BAD_HOSTS.keys())
def test_bad_hosts_are_refused_naming_the_setting(text):
    for setting in ("--hosts", "HOSTS"):
        with pytest.raises(ConfigError) as caught:
            parse_hosts(text, setting)
        message = str(caught.value)
        assert message.startswith(f"{setting}="), message
        assert "\n" not in message and message.isprintable(), repr(message)


@pytest.mark.parametrize("text,expected", GOOD_HOSTS.values(), ids=GOOD_HOSTS.keys())
def test_good_hosts_are_accepted(text, expected):
    assert parse_hosts(text, "--hosts") == expected


def test_a_host_never_starts_with_a_dash_and_the_error_says_why():
    with pytest.raises(ConfigError, match="never starts with '-'"):
        check_host("-oProxyCommand=touch x", "--hosts")


def test_the_address_of_a_host_drops_the_user():
    assert host_address("root@10.0.0.2") == "10.0.0.2"
    assert host_address("node1") == "node1"


def test_too_many_hosts_are_refused():
    with pytest.raises(ConfigError, match=f"at most {MAX_NODES} hosts"):
        parse_hosts(",".join(f"n{i}" for i in range(MAX_NODES + 1)), "--hosts")


# --- topologies and integer lists: bounded ---------------------------------------------------
@pytest.mark.parametrize("text", ["99999999x1", "1x99999999", f"{MAX_NODES + 1}x1",
                                  f"1x{MAX_PROCS_PER_NODE + 1}", "9" * 5000 + "x1",
                                  "\u0661x1", "1x\u00b2"])
def test_absurd_topologies_are_one_line(text):
    with pytest.raises(ConfigError) as caught:
        Topology.parse(text)
    message = str(caught.value)
    assert message.startswith("--topologies=") and len(message) < 200, message


def test_the_largest_topologies_are_accepted():
    assert parse_list(f"{MAX_NODES}x1,1x{MAX_PROCS_PER_NODE}") == [
        Topology(MAX_NODES, 1), Topology(1, MAX_PROCS_PER_NODE)]


@pytest.mark.parametrize("text", ["1048577", "99999999999", "9" * 5000, "\u00b2", "0",
                                  "-1", "1e3", "64;1"])
def test_integer_lists_are_bounded(text):
    with pytest.raises(ConfigError, match="--batch-sizes=.*at most 1,048,576"):
        parse_positive_ints(text, "--batch-sizes")


def test_integer_lists_take_their_own_bound():
    assert parse_positive_ints("1048576 64", "--batch-sizes") == [1048576, 64]
    assert parse_positive_ints("2,4", "--nodes", maximum=MAX_NODES) == [2, 4]
    with pytest.raises(ConfigError, match="--nodes=1025: .*at most 1,024"):
        parse_positive_ints("2,1025", "--nodes", maximum=MAX_NODES)


# --- every ssh command line: `--` right before the host ---------------------------------------
def dashdash_before(argv: list[str], host: str) -> bool:
    """``--`` is the item right before the host, and nothing before it is the host."""
    index = argv.index(host)
    return argv[0] == "ssh" and argv[index - 1] == "--" and argv.index("--") == index - 1


def test_ssh_argv_ends_the_options_before_the_host():
    argv = ssh.ssh_argv(ssh.ssh_base(Path("/etc/ssh/ssh_config")), "root@node1", "true")
    assert dashdash_before(argv, "root@node1") and argv[-1] == "true"


def test_the_launcher_puts_dashdash_before_every_host(monkeypatch, tmp_path):
    seen: list[list[str]] = []

    def fake_run_nodes(commands, deadline_s, log_dir, cleanup):
        seen.extend(command.argv for command in commands)
        cleanup()
        return "outcome"

    monkeypatch.setattr(ssh, "run_nodes", fake_run_nodes)
    monkeypatch.setattr(ssh.subprocess, "run", lambda argv, **kw: seen.append(argv))
    hosts = ("root@127.0.0.2", "127.0.0.3")
    for runtime in ("native", "compose"):
        seen.clear()
        options = ssh.SshOptions(hosts=hosts, remote_dir="/srv/bench", runtime=runtime,
                                 profile="cpu", results_root=tmp_path, env_file=EXAMPLE_ENV,
                                 image="bench-trainer:cpu")
        job = JobSpec(job_id="job1", module="bench.rank.train", workload_args=("--steps", "1"),
                      topology=Topology(2, 1), master_port=29511, rdzv_timeout=60,
                      results=tmp_path / "logs" / "trainer.jsonl", log_dir=tmp_path / "logs",
                      deadline_s=10.0)
        assert ssh.SshLauncher(options).launch(job) == "outcome"
        assert len(seen) == 4  # a start and a cleanup per host
        for argv in seen:
            host = next(h for h in hosts if h in argv)
            assert dashdash_before(argv, host), argv
        # MASTER_ADDR is the first host's address, without its user
        assert "127.0.0.2" in seen[0][-1] and "root@127.0.0.2" not in seen[0][-1]


def test_doctor_puts_dashdash_before_every_host(monkeypatch):
    seen: list[list[str]] = []

    def fake_run(argv, **kwargs):
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 255, "", "ssh: connect: Connection refused")

    monkeypatch.setattr(remote.subprocess, "run", fake_run)
    hosts = ["root@127.0.0.2", "127.0.0.3"]
    over_ssh = Remote(functools.partial(ssh.ssh_argv, ssh.ssh_base(None)))
    rows = doctor.check_hosts(Hosts(tuple(hosts), over_ssh, image="bench-trainer:cpu"))
    assert [r.result for r in rows] == ["FAIL", "FAIL"]
    assert len(seen) == 2
    for argv, host in zip(seen, hosts, strict=True):
        assert dashdash_before(argv, host), argv


def test_a_real_ssh_on_path_sees_dashdash_before_the_host(tmp_path):
    """bench doctor as a user runs it, with an ``ssh`` on PATH that records its argv."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "ssh-argv.txt"
    (bindir / "ssh").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" "----" >> {log}\nexit 255\n')
    (bindir / "ssh").chmod(0o755)
    env = {"PATH": f"{bindir}:/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "bench", "doctor", "--hosts",
                           "root@127.0.0.2,127.0.0.3", "--env-file", str(EXAMPLE_ENV)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    calls = [call.strip("\n").split("\n") for call in log.read_text().split("----\n") if call]
    assert len(calls) == 2
    for argv, host in zip(calls, ["root@127.0.0.2", "127.0.0.3"], strict=True):
        assert argv[argv.index(host) - 1] == "--" and argv.index("--") == argv.index(host) - 1


@pytest.mark.parametrize("argv", [
    ["doctor", "--hosts", f"127.0.0.2,-oProxyCommand=touch {MARKER}"],
    ["doctor", "--hosts", f"a;touch {MARKER}"],
    ["matrix", "--launcher", "ssh", "--hosts", f"127.0.0.2,-oProxyCommand=touch {MARKER}",
     "--runtime", "native", "--topologies", "1x1", "--", "--steps", "1"],
    ["matrix", "--launcher", "ssh", "--hosts", f"$(touch {MARKER})", "--runtime", "native",
     "--", "--steps", "1"],
    ["accept", "--out", "acc", "--launcher", "ssh", "--nodes", "2", "--hosts",
     f"127.0.0.2,-oProxyCommand=touch {MARKER}", "--runtime", "native"],
    ["accept", "--out", "acc", "--launcher", "ssh", "--nodes", "2", "--hosts",
     f"a;touch {MARKER}", "--runtime", "native"],
], ids=["doctor-proxycommand", "doctor-semicolon", "matrix-proxycommand", "matrix-subst",
        "accept-proxycommand", "accept-semicolon"])
def test_a_hostile_host_is_one_line_exit_2_and_runs_nothing(argv, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench", *argv], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bench {argv[0]}: error: --hosts="), lines
    assert not (tmp_path / MARKER).exists() and not list(tmp_path.iterdir())


# --- doctor: exposure and its own flags --------------------------------------------------------
class Canned:
    """A remote whose commands answer from a table instead of over ssh."""

    def __init__(self, addresses: dict[str, str]):
        self.addresses = addresses

    def run(self, host, command, timeout=None):
        device = command.rsplit(" ", 1)[-1]
        out = "\n".join(f"2: {device}    inet {a}/24 brd + scope global {device}"
                        if ":" not in a else f"2: {device}    inet6 {a}/64 scope global"
                        for a in self.addresses.get(f"{host}:{device}", "").split())
        return subprocess.CompletedProcess(command, 0, out, "")


@pytest.mark.parametrize("hosts,addresses,settings,expected", [
    (["127.0.0.2"], {"127.0.0.2:lo": "127.0.0.2"}, {}, ["PASS"]),
    (["10.0.0.2", "10.0.0.3"], {"10.0.0.2:eth0": "10.0.0.2", "10.0.0.3:eth0": "10.0.0.3"},
     {}, ["PASS", "PASS"]),
    # documentation addresses as data only: nothing is sent anywhere
    (["8.8.8.8", "10.0.0.3"], {"8.8.8.8:eth0": "8.8.8.8", "10.0.0.3:eth0": "10.0.0.3"},
     {}, ["WARN", "PASS"]),
    (["10.0.0.2", "10.0.0.3"], {"10.0.0.2:eth0": "10.0.0.2", "10.0.0.3:eth0": "1.1.1.1"},
     {}, ["PASS", "WARN"]),
    (["10.0.0.2"], {"10.0.0.2:eth0": "10.0.0.2 2606:4700::1111"}, {}, ["WARN"]),
    (["10.0.0.2"], {"10.0.0.2:eth0": "10.0.0.2"}, {"MASTER_ADDR": "9.9.9.9"}, ["WARN"]),
], ids=["loopback", "private", "public-master", "public-interface", "public-ipv6",
        "public-master-in-settings"])
def test_doctor_warns_of_a_public_master_or_interface(hosts, addresses, settings, expected):
    job = Hosts(tuple(hosts), Canned(addresses), image="bench-trainer:cpu", settings=settings)
    rows = []
    for host in hosts:
        device = next(key.split(":", 1)[1] for key in addresses if key.startswith(host + ":"))
        rows.append(network.exposure_row(job, host, [device]))
    rows = [r for r in rows if r.check == "exposure"]
    assert [r.result for r in rows] == expected
    for row in rows:
        if row.result == "WARN":
            assert "public address" in row.detail and "no authentication" in row.detail


def test_public_means_globally_routable():
    assert network.is_public("8.8.8.8") and network.is_public("2606:4700::1111")
    for address in ("127.0.0.1", "10.1.2.3", "192.168.0.1", "172.16.0.1", "169.254.1.1",
                    "100.64.0.1", "::1", "fe80::1", "fd00::1", "not-an-address"):
        assert not network.is_public(address), address


@pytest.mark.parametrize("flags,setting", [
    (["--hosts", "a", "--timeout", "nan"], "--timeout"),
    (["--hosts", "a", "--timeout", "inf"], "--timeout"),
    (["--hosts", "a", "--timeout", "0"], "--timeout"),
    (["--hosts", "a", "--timeout", "100000"], "--timeout"),
    (["--hosts", "a", "--master-port", "80"], "--master-port"),
    (["--hosts", "a", "--master-port", "70000"], "--master-port"),
    (["--hosts", "a", "--image", "x;id"], "--image"),
    (["--hosts", "a", "--dataset", "../etc"], "--dataset"),
    (["--hosts", "a", "--dataset", "x\n"], "--dataset"),
    (["--hosts", "a", "--ssh-config", "/no/such/file"], "--ssh-config"),
    (["--hosts", "a", "--env-file", "/no/such/file"], "--env-file"),
], ids=["timeout-nan", "timeout-inf", "timeout-zero", "timeout-huge", "port-low",
        "port-high", "image", "dataset-dotdot", "dataset-newline", "ssh-config",
        "env-file"])
def test_doctor_refuses_its_own_bad_flags_in_one_line(flags, setting, capsys):
    try:
        code = doctor.main(["--env-file", str(EXAMPLE_ENV), *flags])
    except SystemExit as exit_:  # argparse's own refusals (a type that does not parse)
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and setting in err[0], err


@pytest.mark.parametrize("port", ["0", "abc", "99999", " "])
def test_doctor_refuses_a_bad_master_port_in_the_settings(port, tmp_path, capsys):
    env_file = tmp_path / "node.env"
    env_file.write_text(EXAMPLE_ENV.read_text() + f"\nMASTER_PORT={port}\n")
    assert doctor.main(["--hosts", "a", "--env-file", str(env_file)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "MASTER_PORT=" in err[0], err


def test_only_known_settings_are_forwarded_to_the_hosts(monkeypatch, capsys):
    """The remote line carries the allow-listed communication settings, never an unknown
    NCCL_ variable (a token, say), and says which it left behind."""
    monkeypatch.setattr(ssh.os, "environ", {"NCCL_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "4",
                                            "NCCL_FOO_TOKEN": "s3cret", "HOME": "/root"})
    assert ssh.forwarded_env() == {"NCCL_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "4"}
    assert "not forwarded (not a known setting): NCCL_FOO_TOKEN" in capsys.readouterr().err
