"""Sizes and link rates as people write them."""
from __future__ import annotations

import pytest

from bench.options import ConfigError
from bench.units import format_rate, format_size, parse_rate, parse_size, tc_rate


@pytest.mark.parametrize("text, expected", [
    ("512MiB", 512 * 2**20), ("1.5KiB", 1536), ("64", 64), ("2 GB", 2 * 10**9), ("8b", 8)])
def test_sizes(text, expected):
    assert parse_size(text, "--max-size") == expected


@pytest.mark.parametrize("text, expected", [
    ("1gbit", 10**9), ("5Gbit", 5 * 10**9), ("100mbit", 10**8), ("2.5gbit", 25 * 10**8)])
def test_rates(text, expected):
    assert parse_rate(text, "--link") == expected


@pytest.mark.parametrize("parse, text, hint", [
    (parse_size, "12 parsecs", "a size such as"), (parse_size, "0.1", "at least 1 byte"),
    (parse_rate, "fast", "a link rate such as"), (parse_rate, "5gb", "a link rate such as"),
    (parse_rate, "999bit", "at least 1kbit")])
def test_bad_spellings_name_the_flag_and_the_fix(parse, text, hint):
    with pytest.raises(ConfigError) as error:
        parse(text, "--flag")
    assert str(error.value).startswith(f"--flag={text}: ") and hint in str(error.value)


def test_formats_read_back():
    assert format_size(64 * 2**20) == "64 MiB" and format_size(1536) == "1.5 KiB"
    assert format_rate(5 * 10**9) == "5 Gbit/s" and tc_rate(5 * 10**9) == "5gbit"


def test_uneven_topologies_parse_and_print():
    from bench.topology import Topology, parse_list

    lab = Topology.parse("1+1+2")
    assert (lab.nodes, lab.devices, lab.counts, str(lab)) == (3, 4, (1, 1, 2), "1+1+2")
    assert [lab.procs_on(i) for i in range(3)] == [1, 1, 2] and lab.uneven
    assert Topology.parse("2+2") == Topology.parse("2x2"), "even counts are NxG"
    assert [str(t) for t in parse_list("1x1,1+2")] == ["1x1", "1+2"]
    record_topology = Topology.of_record({"nnodes": 2, "nproc_per_node": 1,
                                          "procs_per_node": [1, 2]})
    assert record_topology == Topology.parse("1+2")
    assert Topology.of_record({"nnodes": 2, "nproc_per_node": 4}) == Topology(2, 4)


@pytest.mark.parametrize("text", ["1+0", "1++2", "1+x", "+1", "1+65", "1+2+" ])
def test_bad_uneven_topologies_are_refused(text):
    from bench.options import ConfigError
    from bench.topology import Topology

    with pytest.raises(ConfigError, match="--topologies"):
        Topology.parse(text)


def test_uneven_nodes_get_their_own_gpus_and_process_counts(tmp_path):
    from bench.host import gpus
    from bench.host.launchers import native
    from bench.host.launchers.base import JobSpec
    from bench.topology import Topology

    lab = Topology.parse("1+1+2")
    assert gpus.assign(lab, ["0", "1", "2", "3"]) == ["0", "1", "2,3"]
    job = JobSpec(job_id="j", module="bench.rank.train", workload_args=("--steps", "1"),
                  topology=lab, master_port=29500, rdzv_timeout=60,
                  results=tmp_path / "r.jsonl", log_dir=tmp_path, deadline_s=60)
    launcher = native.NativeLauncher(native.NativeOptions(visible_gpus=("0", "1", "2", "3")))
    commands = launcher.commands(job)
    procs = [c.argv[c.argv.index("--nproc_per_node") + 1] for c in commands]
    assert procs == ["1", "1", "2"]
