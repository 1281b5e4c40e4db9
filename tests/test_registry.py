"""The launcher registry: one table from a launcher's name to its options class (which
declares its flags and checks itself) and its launcher class; flags, refusals and the
BENCH_LAUNCHER_* settings all come from it."""
from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.host import matrix
from bench.host.launchers import registry
from bench.host.launchers.base import Launcher
from bench.host.launchers.flags import LaunchContext, env_name, flag_fields, flag_name
from bench.options import ConfigError
from bench.topology import Topology
from conftest import EXAMPLE_ENV

CONTEXT = LaunchContext(topologies=(Topology(1, 1), Topology(2, 1)))


@pytest.mark.parametrize("name", registry.LAUNCHERS)
def test_every_name_has_an_options_class_and_a_launcher_that_follows_the_protocol(name):
    entry = registry.TABLE[name]
    assert dataclasses.is_dataclass(entry.options)
    assert entry.launcher.name == name
    for method in ("preflight", "render", "launch"):
        ours = inspect.signature(getattr(entry.launcher, method))
        protocol = inspect.signature(getattr(Launcher, method))
        assert list(ours.parameters) == list(protocol.parameters), (name, method)


def test_the_names_are_the_table_and_build_is_a_lookup():
    assert registry.LAUNCHERS == ("native", "compose", "ssh", "netns", "slurm", "k8s")
    launcher = registry.build("native", registry.options_from("native", {}, CONTEXT, {}))
    assert launcher.name == "native"
    with pytest.raises(ValueError, match="unknown launcher"):
        registry.build("pbs", None)


def test_every_flag_field_of_every_launcher_is_a_matrix_flag_naming_its_launchers():
    parser = matrix.parser("bench matrix")
    actions = {option: action for action in parser._actions for option in action.option_strings}
    for name, entry in registry.TABLE.items():
        for field in flag_fields(entry.options):
            action = actions[flag_name(field)]
            assert name in action.help.split(":")[0] or f"{name}:" in action.help, action.help
            for choice in field.metadata.get("choices") or ():
                assert choice in action.choices
    # A flag several launchers take is one flag, whose help names them all.
    assert actions["--remote-dir"].help.startswith("ssh, slurm: ")
    assert "BENCH_LAUNCHER_PARTITION" in parser.format_help()


@pytest.mark.parametrize("name,flag,value,takers", [
    ("native", "--partition", "gpu", "slurm"),
    ("compose", "--runtime", "native", "ssh or slurm"),
    ("netns", "--image", "bench-trainer:cpu", "compose, ssh, slurm or k8s"),
    ("slurm", "--namespace", "lab", "k8s"),
    ("k8s", "--link", "1gbit", "netns"),
])
def test_a_flag_of_another_launcher_is_refused_naming_those_that_take_it(name, flag, value,
                                                                       takers):
    with pytest.raises(ConfigError) as refused:
        registry.options_from(name, {flag: value}, CONTEXT, {})
    assert str(refused.value) == f"{flag}={value}: only with --launcher {takers}"


def test_settings_apply_to_the_chosen_launcher_only_and_lose_to_flags():
    environ = {"BENCH_LAUNCHER_PARTITION": "gpu", "BENCH_LAUNCHER_GPUS_PER_NODE": "2",
               "BENCH_LAUNCHER_HOSTS": "not;a host", "BENCH_LAUNCHER_ACCOUNT": "",
               "BENCH_LAUNCHER_LINK": "fast"}
    options = registry.options_from("slurm", {}, CONTEXT, environ)
    assert (options.partition, options.gpus_per_node, options.account) == ("gpu", 2, None)
    assert registry.options_from("slurm", {"--partition": "cpu"}, CONTEXT,
                                 environ).partition == "cpu"
    # Another launcher's settings are ambient: ignored, not refused, not even checked.
    assert registry.options_from("native", {}, CONTEXT, environ) is not None
    with pytest.raises(ConfigError, match="BENCH_LAUNCHER_LINK=fast"):
        registry.options_from("netns", {}, CONTEXT, environ)
    with pytest.raises(ConfigError, match="BENCH_LAUNCHER_K8S_KIND=job: one of"):
        registry.options_from("k8s", {"--image": "a:1"}, CONTEXT,
                              {"BENCH_LAUNCHER_K8S_KIND": "job"})


def test_a_flag_given_as_none_is_not_given():
    """How a command with its own parser (bench doctor) passes what its user left out."""
    options = registry.options_from("slurm", {"--partition": None, "--namespace": None},
                                    CONTEXT, {"BENCH_LAUNCHER_PARTITION": "gpu"})
    assert options.partition == "gpu"


def test_the_matrix_reads_the_settings_of_its_launcher(tmp_path):
    argv = ["--launcher", "slurm", "--results", str(tmp_path / "runs.jsonl"), "--", "--steps",
            "1"]
    environ = {"BENCH_LAUNCHER_PARTITION": "gpu", "BENCH_LAUNCHER_IMAGE": "bench-trainer:cpu",
               "BENCH_LAUNCHER_HOSTS": "h1"}
    cfg = matrix.MatrixConfig.from_args(argv, "bench matrix", environ)
    assert cfg.launcher_options.partition == "gpu"
    assert cfg.launcher_options.image == "bench-trainer:cpu"
    cfg = matrix.MatrixConfig.from_args(["--partition", "cpu", *argv], "bench matrix", environ)
    assert cfg.launcher_options.partition == "cpu"


def test_every_flag_has_its_own_variable():
    names = [env_name(f) for e in registry.TABLE.values() for f in flag_fields(e.options)]
    flags = [flag_name(f) for e in registry.TABLE.values() for f in flag_fields(e.options)]
    # One variable per flag, the same for every launcher that takes it.
    assert len(set(names)) == len(set(flags))
    assert env_name(next(f for f in flag_fields(registry.TABLE["k8s"].options)
                         if f.name == "kind")) == "BENCH_LAUNCHER_K8S_KIND"


# --- any value set, as flags: its options, or ConfigError --------------------------------------
SAMPLES = {
    "--image": ["bench-trainer:cpu", "registry.example:5000/lab/t:1", "-v/:/host", ""],
    "--env-file": [str(EXAMPLE_ENV), "/no/such.env"],
    "--profile": ["cpu", "gpu", "gpu-ib"],
    "--hosts": ["h1,h2", "root@127.0.0.2", "a,,b", "-oProxyCommand=x"],
    "--runtime": ["compose", "native", "pyxis"],
    "--remote-dir": ["/srv/bench", "relative", "/a,/:/host", "/srv/a\nb"],
    "--ssh-config": [str(EXAMPLE_ENV), "/no/such/config"],
    "--link": ["1gbit", "100mbit", "fast", "0"],
    "--cpus-per-node": ["1", "0", "x", "--1"],
    "--host-cpus": ["0/0", "0-1", "0/1/0", "1-0", "9999", "0//1"],
    "--host-cpu-quota": ["0.5", "0.5,0.4", "0.25,0.5,0.5", "0", "nan", "2"],
    "--host-links": ["1gbit,100mbit", ",100mbit", "1gbit", ",,"],
    "--nfs-export": [str(EXAMPLE_ENV.parent), "/no/such/dir", "/tmp/a,b", "-x"],
    "--nfs-link": ["100mbit", "2mbit", "fast", "0"],
    "--partition": ["gpu", "bad name", "-x"],
    "--account": ["lab-1", "a;b"],
    "--time-limit": ["30", "1:00:00", "ten", "10\n", "0", "5:99"],
    "--gpus-per-node": ["0", "4", "-1", "65", "x"],
    "--k8s-kind": ["indexed", "pytorchjob", "job"],
    "--namespace": ["lab", "Bad_Name"],
    "--kube-context": ["ctx-a", "a b"],
    "--results-claim": ["bench-results", "UPPER"],
    "--results-host-path": ["/srv/results", "/etc", "relative"],
    "--shm-size": ["8Gi", "8", "512Mi"],
}


@st.composite
def flag_values(draw) -> tuple[str, dict[str, str]]:
    name = draw(st.sampled_from(registry.LAUNCHERS))
    flags = [flag_name(f) for f in flag_fields(registry.TABLE[name].options)]
    chosen = draw(st.lists(st.sampled_from(flags), unique=True)) if flags else []
    return name, {flag: draw(st.one_of(st.sampled_from(SAMPLES[flag]), st.text(max_size=20)))
                  for flag in chosen}


def _expected(name: str, field: dataclasses.Field, text: str) -> object:
    """The value a flag's text stands for: its own parse, else the field's type."""
    parse = field.metadata.get("parse")
    if parse is not None:
        return parse(text, flag_name(field))
    kind = registry._base_type(name, field)
    return int(text) if kind is int else Path(text) if kind is Path else text


@given(flag_values())
def test_any_flag_values_round_trip_into_the_options_or_are_refused(case):
    name, flags = case
    try:
        options = registry.options_from(name, flags, CONTEXT, {})
    except ConfigError:
        return
    for field in flag_fields(registry.TABLE[name].options):
        flag = flag_name(field)
        if flag not in flags:
            continue
        if name == "slurm" and field.name == "profile" and options.gpus_per_node:
            assert options.profile == "gpu"   # the nodes ask for GPUs: the GPU service
            continue
        assert getattr(options, field.name) == _expected(name, field, flags[flag]), flag
