"""The acceptance verdict where labs already look: Prometheus.

Each row becomes three gauges labelled by stage, subject and check: ``bench_accept_status``
(0 PASS, 1 WARN, 2 FAIL), ``bench_accept_measured`` and ``bench_accept_expected`` (with the
unit as a label), plus the run's exit code, failed and warned counts and its time. Written
with the official ``prometheus-client`` package as the text exposition format for
node_exporter's textfile collector (``--prometheus-textfile DIR/bench_accept.prom``), or
pushed to a Pushgateway (``--pushgateway http://HOST:9091``), grouped by ``--cluster``.
"""
from __future__ import annotations

import re
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from bench.analysis.acceptance import SEVERITY, Row
from bench.options import ConfigError
from bench.paths import HASH_MARK, check_output, write_output
from bench.topology import check_host

JOB = "bench_accept"
# A Pushgateway grouping value becomes part of a URL path: a plain name.
_CLUSTER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", re.ASCII)
FIX = "give another file, or remove what is there"


def check_cluster(name: str) -> str:
    if not _CLUSTER.fullmatch(name):
        raise ConfigError("--cluster", name, "must be a plain name (letters, digits, _ . -; "
                          "up to 63), e.g. lab-a")
    return name


def check_gateway(url: str) -> str:
    """http(s)://HOST[:PORT] with nothing else: no credentials, path, query or fragment,
    and HOST a strict host name (topology.check_host: no blank, '$' or newline in it)."""
    refused = ConfigError("--pushgateway", url, "must be http://HOST:PORT (or https), e.g. "
                          "http://127.0.0.1:9091")
    if not url.isprintable():   # urlsplit drops a newline or tab: http://a\nb read as ab
        raise refused
    try:
        parts = urllib.parse.urlsplit(url)
        port_ok = parts.port is None or 1 <= parts.port <= 65535
    except ValueError:          # a port that is no number, an unclosed [IPv6
        raise refused from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username \
            or parts.password or parts.path not in ("", "/") or parts.query \
            or parts.fragment or not port_ok:
        raise refused
    try:
        check_host(parts.hostname, "--pushgateway")
    except ConfigError:
        raise refused from None
    return url.rstrip("/")


def check_textfile(path: Path) -> Path:
    if path.suffix != ".prom":
        raise ConfigError("--prometheus-textfile", path, "must end in .prom (node_exporter's "
                          "textfile collector reads only those)")
    if not path.parent.is_dir():    # found now, not after the whole acceptance run
        raise ConfigError("--prometheus-textfile", path, "its directory does not exist: give "
                          "node_exporter's textfile directory, e.g. "
                          "/var/lib/node_exporter/textfile_collector/bench.prom")
    check_output(path, "--prometheus-textfile", (), FIX)
    return path


def registry_of(rows: Sequence[Row], exit_code: int, utc_seconds: float):
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()
    labels = ["stage", "subject", "check"]
    status = Gauge("bench_accept_status", "acceptance verdict: 0 PASS, 1 WARN, 2 FAIL",
                   labels, registry=registry)
    measured = Gauge("bench_accept_measured", "the measured figure", [*labels, "unit"],
                     registry=registry)
    expected = Gauge("bench_accept_expected", "the figure it was judged against",
                     [*labels, "unit"], registry=registry)
    for row in rows:
        status.labels(row.stage, row.subject, row.check).set(SEVERITY[row.status])
        if row.measured is not None:
            measured.labels(row.stage, row.subject, row.check, row.unit).set(row.measured)
        if row.expected is not None:
            expected.labels(row.stage, row.subject, row.check, row.unit).set(row.expected)
    for name, text, value in [
            ("bench_accept_exit_code", "0 when nothing failed", exit_code),
            ("bench_accept_failed_rows", "rows that FAILed", sum(r.status == "FAIL" for r in rows)),
            ("bench_accept_warned_rows", "rows that WARNed", sum(r.status == "WARN" for r in rows)),
            ("bench_accept_time_seconds", "when the acceptance ran (unix time)", utc_seconds)]:
        Gauge(name, text, registry=registry).set(value)
    return registry


def textfile(rows: Sequence[Row], exit_code: int, utc_seconds: float) -> str:
    """The exposition text, the stack's mark first (a comment to Prometheus)."""
    from prometheus_client import generate_latest

    body = generate_latest(registry_of(rows, exit_code, utc_seconds)).decode()
    return f"{HASH_MARK}\n{body}"


def write_textfile(path: Path, rows: Sequence[Row], exit_code: int, utc_seconds: float) -> None:
    write_output(path, textfile(rows, exit_code, utc_seconds), setting="--prometheus-textfile",
                 fix=FIX)


def push(gateway: str, cluster: str, rows: Sequence[Row], exit_code: int,
         utc_seconds: float, timeout_s: float = 10.0) -> None:
    """Replace this cluster's group on the Pushgateway (PUT: rows gone since are dropped)."""
    from prometheus_client import push_to_gateway

    push_to_gateway(gateway, job=JOB, registry=registry_of(rows, exit_code, utc_seconds),
                    grouping_key={"cluster": cluster}, timeout=timeout_s)
