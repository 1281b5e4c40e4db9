"""The acceptance verdict for Prometheus: the textfile, and a push that Prometheus itself
reads back (Debian's prometheus and prometheus-pushgateway, started here on loopback)."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from bench.analysis.acceptance import FAIL, PASS, WARN, Row
from bench.host import accept_export
from bench.options import ConfigError
from tests.conftest import _require, free_port

ROWS = [Row("device", "node 2 h2 rank 2", "matmul fp32", "GFLOP/s", 20.0, 5.0, FAIL,
            "75% below", (5.0, 5.1)),
        Row("link", "node 0 - node 1", "all-reduce 25 MiB", "GB/s", 0.125, 0.12, PASS, "ok"),
        Row("preflight", "netns", "launcher checks", "", None, None, WARN, "x")]


def _samples(text: str) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_textfile_holds_every_row_and_the_totals():
    text = accept_export.textfile(ROWS, 1, 1.8e9)
    assert text.startswith("# written by python -m bench")
    samples = _samples(text)
    key = (("check", "matmul fp32"), ("stage", "device"), ("subject", "node 2 h2 rank 2"))
    assert samples[("bench_accept_status", key)] == 2
    assert samples[("bench_accept_measured", tuple(sorted((*key, ("unit", "GFLOP/s")))))] == 5
    assert samples[("bench_accept_failed_rows", ())] == 1
    assert samples[("bench_accept_warned_rows", ())] == 1
    assert samples[("bench_accept_exit_code", ())] == 1
    # A row without figures has a status and nothing else.
    assert not any(name == "bench_accept_measured" and ("stage", "preflight") in labels
                   for name, labels in samples)


@given(st.text(max_size=40), st.text(max_size=40))
def test_any_subject_and_check_survive_the_exposition_format(subject, check):
    """Quotes, backslashes, newlines in a label: escaped, and read back the same."""
    row = Row("device", subject, check, "GB/s", 1.0, 2.0, PASS, "")
    samples = _samples(accept_export.textfile([row], 0, 0.0))
    labels = (("check", check), ("stage", "device"), ("subject", subject))
    assert samples[("bench_accept_status", labels)] == 0


def test_the_textfile_is_written_only_over_its_own(tmp_path):
    target = tmp_path / "bench_accept.prom"
    accept_export.write_textfile(target, ROWS, 1, 0.0)
    accept_export.write_textfile(target, ROWS[1:], 0, 0.0)
    assert "node 2" not in target.read_text()
    theirs = tmp_path / "node.prom"
    theirs.write_text("node_thing 1\n")
    with pytest.raises(ConfigError, match="--prometheus-textfile"):
        accept_export.check_textfile(theirs)
    with pytest.raises(ConfigError, match="must end in .prom"):
        accept_export.check_textfile(tmp_path / "x.txt")


@pytest.mark.parametrize("url", ["ftp://h:1", "http://", "http://u:p@h:9091", "http://h:9091/x",
                                 "http://h:99999", "http://-h:1", "http://h:1?q", "h:9091",
                                 "http://a b:9091", "http://a$b:9091", "http://a\nb:9091",
                                 "http://[::1:9091", "http://h:x", "http://a;b:1"])
def test_a_bad_gateway_is_refused(url):
    with pytest.raises(ConfigError, match="--pushgateway"):
        accept_export.check_gateway(url)


@pytest.mark.parametrize("url", ["http://127.0.0.1:9091", "https://gw.lab.example",
                                 "http://[::1]:9091/"])
def test_a_gateway_url_is_taken_as_given(url):
    assert accept_export.check_gateway(url) == url.rstrip("/")


def test_a_textfile_in_a_missing_directory_is_refused_before_the_run(tmp_path):
    with pytest.raises(ConfigError, match="its directory does not exist"):
        accept_export.check_textfile(tmp_path / "nodir" / "bench.prom")


@pytest.mark.parametrize("name", ["", "-x", "a/b", "a b", "x" * 64, "é"])
def test_a_bad_cluster_name_is_refused(name):
    with pytest.raises(ConfigError, match="--cluster"):
        accept_export.check_cluster(name)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read()


def _wait_ready(url: str, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{what} exited: {proc.stdout.read()[-2000:]}"
        try:
            _get(url)
            return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"{what} did not answer at {url}")


@pytest.mark.e2e
def test_a_push_reaches_prometheus_through_the_pushgateway(tmp_path: Path):
    for tool in ("prometheus", "prometheus-pushgateway"):
        _require(shutil.which(tool) is not None, f"{tool} is missing: make test-deps "
                 "installs it (Debian's prometheus, prometheus-pushgateway)")
    gateway_port, prometheus_port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [{"job_name": "pushgateway", "honor_labels": True,
                            "static_configs": [{"targets": [f"127.0.0.1:{gateway_port}"]}]}]}))
    procs = []
    try:
        procs.append(subprocess.Popen(
            ["prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{gateway_port}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        procs.append(subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'db'}",
             f"--web.listen-address=127.0.0.1:{prometheus_port}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        gateway = f"http://127.0.0.1:{gateway_port}"
        _wait_ready(f"{gateway}/-/ready", procs[0], "the pushgateway")
        _wait_ready(f"http://127.0.0.1:{prometheus_port}/-/ready", procs[1], "prometheus")
        accept_export.push(accept_export.check_gateway(gateway), "lab-a", ROWS, 1, time.time())
        query = urllib.parse.urlencode({"query": 'bench_accept_status{cluster="lab-a"}'})
        deadline, found = time.monotonic() + 60, []
        while time.monotonic() < deadline and len(found) < len(ROWS):
            answer = json.loads(_get(f"http://127.0.0.1:{prometheus_port}/api/v1/query?{query}"))
            found = answer["data"]["result"]
            time.sleep(0.5)
        series = {(r["metric"]["stage"], r["metric"]["subject"]): float(r["value"][1])
                  for r in found}
        assert series == {("device", "node 2 h2 rank 2"): 2.0, ("link", "node 0 - node 1"): 0.0,
                          ("preflight", "netns"): 1.0}, found
        assert {r["metric"]["job"] for r in found} == {accept_export.JOB}
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
