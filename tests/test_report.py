"""The one-page report: its summary from real records, and the page in a real browser."""
from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys

import pytest

from bench import record
from bench.analysis import report
from conftest import IN_CI, REPO

FIXTURE = REPO / "tests" / "fixtures" / "table-fixture.jsonl"


def fixture_records() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def test_the_summary_answers_the_scaling_question():
    best, scaling, comm = report.summary(fixture_records())
    # The fixture's fastest run: 1x2 at batch 128, 440 samples/s.
    assert best.startswith("best samples/s: 440.0 on 1x2 (2 GPUs), resnet152, batch 128")
    # Batch 128: 2x1 (two nodes) ran 100 and 120 samples/s (plus an OOM) against 220 and
    # 224 on one GPU: medians 110 / 222.
    assert f"2x1 (2 GPUs): {110 / 222:.2f}x over 1x1, efficiency {110 / 222 / 2:.0%}" in scaling
    shares = [r["comm_share"] for r in fixture_records() if r["batch_size_per_device"] == 128
              and r["nnodes"] == 2 and r["status"] == "ok"]
    assert shares
    assert comm == f"exposed communication at 2x1: {statistics.median(shares):.0%} of the step"


def test_no_ok_run_says_so():
    failed = [dict(r, status="error", error="x") for r in fixture_records()]
    assert report.summary(failed) == ["no run finished ok: see the status column and the job "
                                      "logs"]


def test_report_writes_markdown_and_html_beside_the_results(tmp_path):
    results = tmp_path / "runs.jsonl"
    shutil.copy(FIXTURE, results)
    md, page = report.write(results)
    assert md == tmp_path / "runs.md" and page == tmp_path / "runs.html"
    text = md.read_text()
    for heading in ("## Summary", "## Where the numbers come from", "## Scaling tables",
                    "## Communication", "## Plots"):
        assert heading in text
    assert "| single GPU" in text and "![runs-" in text
    html = page.read_text()
    assert html.count("<table>") == 1 + 2 + 1   # provenance, two scaling tables, comm
    assert html.count("data:image/png;base64,") == len(list(tmp_path.glob("runs-*.png"))) > 0
    assert "src=\"runs-" not in html, "self-contained: no file references"


@pytest.mark.e2e
def test_the_page_renders_in_a_real_browser(tmp_path):
    browser = shutil.which("chromium")
    if browser is None:
        message = "chromium is missing: `make test-deps` installs it"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(reason=message)  # under CI the same check fails instead (IN_CI above)
    results = tmp_path / "runs.jsonl"
    shutil.copy(FIXTURE, results)
    _, page = report.write(results)
    # What the browser made of the page: its tables, and each image's decoded width.
    probe = ("<script>window.addEventListener('load', () => { document.title = 'tables=' + "
             "document.querySelectorAll('table').length + ' rows=' + "
             "document.querySelectorAll('tr').length + ' images=' + "
             "[...document.images].map(i => i.naturalWidth).join(',') + ' mode=' + "
             "document.compatMode; });</script>")
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text().replace("</body>", probe + "</body>"))
    out = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
         "--virtual-time-budget=5000", "--dump-dom", probed.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    title = out.stdout.split("<title>")[1].split("</title>")[0]
    counts = dict(part.split("=") for part in title.split())
    assert counts["tables"] == "4" and int(counts["rows"]) > 10
    assert counts["mode"] == "CSS1Compat", "bench's mark before the doctype: standards mode"
    widths = [int(w) for w in counts["images"].split(",")]
    assert len(widths) == len(list(tmp_path.glob("runs-*.png"))) and min(widths) > 100
    assert record.load(results)   # the results file itself is untouched and valid


def test_a_prediction_given_is_on_the_page(tmp_path):
    results = tmp_path / "runs.jsonl"
    shutil.copy(FIXTURE, results)
    (tmp_path / "prediction.txt").write_text("2 nodes: 1.62x predicted\n")
    proc = subprocess.run([sys.executable, "-m", "bench", "report", str(results),
                           "--prediction", str(tmp_path / "prediction.txt")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "## Prediction" in (tmp_path / "runs.md").read_text()
    assert "2 nodes: 1.62x predicted" in (tmp_path / "runs.html").read_text()
    assert proc.stdout.splitlines()[-1] == f"report: {tmp_path / 'runs.md'} and " \
                                           f"{tmp_path / 'runs.html'}"


def _sweep(nodes: int, busbw: float, rate_bps: int | None) -> dict:
    link = {"rate": "1gbit", "rate_bps": rate_bps, "kind": "emulated"} if rate_bps else {}
    return {"mode": "allreduce", "status": "ok", "nnodes": nodes, "world_size": nodes,
            "env": {"link": link},
            "sizes": [{"size_bytes": 1024, "busbw_GBps": busbw / 100},
                      {"size_bytes": 32 * 2**20, "busbw_GBps": busbw}]}


def _one_rank() -> dict:
    """A one-rank sweep as recorded now: no bandwidth (null)."""
    rec = _sweep(1, 0.0, None)
    for row in rec["sizes"]:
        row["busbw_GBps"] = None
    return rec


def test_a_file_of_sweeps_is_summarised_by_the_bandwidth_it_got():
    sweeps = [_sweep(2, 0.12, 10**9), _sweep(2, 0.10, 10**9), _sweep(2, 0.11, 10**9),
              _sweep(4, 0.09, None), dict(_sweep(3, 0.5, 10**9), status="error"),
              _sweep(1, 0.0, 10**9), _one_rank()]
    lines = report.summary(sweeps)
    assert lines == [
        "all-reduce over 2 node(s), 2 ranks: busbw 0.88 Gbit/s at 32 MiB (median of 3), "
        "88% of the 1 Gbit/s link",
        "all-reduce over 4 node(s), 4 ranks: busbw 0.72 Gbit/s at 32 MiB (median of 1)"]
    # Training records and sweeps in one file: the scaling lines, then the link's.
    both = report.summary(fixture_records() + sweeps[:1])
    assert both[0].startswith("best samples/s") and both[-1].startswith("all-reduce over 2")


# --- the ranks' own versions and GPU settings ------------------------------------------

def _ranks(*versions: tuple[str, float]) -> dict:
    """A fixture record whose ranks ran these (torch, power limit W) pairs."""
    rec = fixture_records()[2]
    rank = rec["env"]["ranks"][0]
    rec["env"]["ranks"] = [
        {**rank, "rank": i, "torch": torch, "cuda": "13.0", "nccl": "2.28.9",
         "driver": "580.159.04", "gpu_settings": {"enforced_power_limit_w": watts,
                                                  "ecc_enabled": True, "mig_enabled": False,
                                                  "pcie_max_gen": 5, "pcie_max_width": 16}}
        for i, (torch, watts) in enumerate(versions)]
    return rec


def test_a_job_whose_ranks_disagree_is_named_in_the_provenance_block():
    """Rank 0's versions are the env block's; a rank that loaded another torch or runs its
    GPU at another power limit measures something else, and the report says so in one
    line."""
    split = _ranks(("2.11.0+cu130", 700.0), ("2.14.1+cu130", 700.0),
                   ("2.14.1+cu130", 500.0))
    assert report.rank_disagreement(split) == (
        "torch 2.11.0+cu130 on rank 0, 2.14.1+cu130 on ranks 1, 2; "
        "power limit W 500.0 on rank 2, 700.0 on ranks 0, 1")
    alike = _ranks(("2.14.1+cu130", 700.0), ("2.14.1+cu130", 700.0))
    assert report.rank_disagreement(alike) is None
    assert report.rank_disagreement(fixture_records()[0]) is None, "no per-rank versions"
    rows = dict(report.provenance([alike, split]))
    assert rows["rank versions"].startswith(f"ranks disagree in 1 run(s); {split['run_id']}: "
                                            "torch 2.11.0+cu130 on rank 0")
    assert dict(report.provenance([alike]))["rank versions"] == "every run's ranks agree"
    assert dict(report.provenance(fixture_records()))["rank versions"] == "-"
    assert rows["GPU settings"] == "700 W limit, ECC on, MIG off, PCIe gen 5 x16"
    for rec in (split, alike):
        assert record.problem_of(rec) is None
    text = report.markdown(REPO / "runs.jsonl", [alike, split])
    assert "| rank versions | ranks disagree in 1 run(s)" in text
