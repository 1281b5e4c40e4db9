"""bench accept's transport rows (issue 27/28): on GPUs, per node, the network NCCL chose
(the record's nccl_transport, parsed from NCCL's own INFO lines) against the one expected.
Canned records: their views are the canned NCCL logs' (tests/fixtures/nccl)."""
from __future__ import annotations

import json
import subprocess
import sys

from bench import nccl_log
from bench.analysis import acceptance, transport
from bench.analysis.acceptance import FAIL, PASS, WARN
from bench.host import accept
from conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "nccl"
IB = nccl_log.parse((FIXTURES / "ib-two-nodes-gdr.log").read_text())
SOCKET = nccl_log.parse((FIXTURES / "socket-fallback-shm.log").read_text())


def _view(node: int, local: int, parsed: dict, **extra) -> dict:
    return {"rank": node * 2 + local, "node_rank": node, "hostname": f"gpu{node}",
            "expected_net": None, "captured": True, "reason": None, **parsed, **extra}


def _views(node1: dict = IB, **extra) -> list[dict]:
    return [_view(0, 0, IB, **extra), _view(0, 1, IB, **extra),
            _view(1, 0, node1, **extra), _view(1, 1, node1, **extra)]


def _rows(views, nnodes=2, expect=None, source=None):
    return {row.subject: row for row in transport.judge(views, nnodes, expect, source)}


def test_infiniband_where_it_is_expected_passes_per_node():
    rows = _rows(_views(), expect="IB", source="--expect-net IB")
    assert list(rows) == ["node 0", "node 1"]
    for name, row in rows.items():
        assert (row.stage, row.check, row.status) == ("link", "transport", PASS)
        assert row.reason == (f"{name}: NCCL chose IB (mlx5_0:1/IB, mlx5_1:1/IB), GPUDirect "
                              "RDMA on; P2P CUMEM/read, NET, NVLS, as --expect-net IB expects")


def test_a_node_that_fell_back_to_sockets_fails_naming_it_and_the_fix():
    rows = _rows(_views(SOCKET), expect="IB", source="--expect-net IB")
    assert rows["node 0"].status == PASS
    failed = rows["node 1"]
    assert failed.status == FAIL
    assert failed.reason.startswith("node 1: NCCL chose Socket on host gpu1 where "
                                    "--expect-net IB expects IB: no InfiniBand device")
    assert "ibv_devinfo" in failed.reason


def test_the_nodes_own_expectation_applies_without_a_flag():
    """The gpu-ib profile told the nodes BENCH_EXPECT_NET=IB; the record says so."""
    rows = _rows(_views(SOCKET, expected_net="IB"))
    assert rows["node 1"].status == FAIL
    assert "where BENCH_EXPECT_NET=IB (the nodes') expects IB" in rows["node 1"].reason


def test_sockets_between_nodes_with_nothing_expected_warn_and_ask():
    rows = _rows([_view(0, 0, SOCKET), _view(1, 0, SOCKET)])
    assert [row.status for row in rows.values()] == [WARN, WARN]
    assert "Expected? give --expect-net Socket" in rows["node 0"].reason
    # The same network on one node carries nothing between nodes: nothing to ask.
    (row,) = _rows([_view(0, 0, SOCKET)], nnodes=1).values()
    assert row.status == PASS and "nothing expected (--expect-net)" in row.reason
    # Sockets expected: a pass.
    rows = _rows([_view(0, 0, SOCKET), _view(1, 0, SOCKET)], expect="Socket",
                 source="--expect-net Socket")
    assert {row.status for row in rows.values()} == {PASS}


def test_infiniband_without_gpudirect_rdma_warns():
    staged = {**IB, "gdr": False}
    rows = _rows(_views(staged), expect="IB", source="BENCH_EXPECT_NET=IB")
    assert rows["node 1"].status == WARN and "nvidia-peermem" in rows["node 1"].reason


def test_an_uncaptured_choice_fails_only_where_one_is_expected():
    hidden = {**nccl_log.EMPTY, "captured": False,
              "reason": "NCCL_DEBUG=WARN is set and NCCL prints no INFO lines"}
    views = [_view(0, 0, IB), {**_view(1, 0, IB), **hidden}]
    rows = _rows(views, expect="IB", source="--expect-net IB")
    assert rows["node 1"].status == FAIL
    assert rows["node 1"].reason == ("node 1: NCCL's choice is unknown on 1 rank(s) "
                                     "(NCCL_DEBUG=WARN is set and NCCL prints no INFO lines), "
                                     "so --expect-net IB cannot be checked")
    assert _rows(views)["node 1"].status == WARN


def _record(views) -> dict:
    return {"devices": [], "links": [{"nodes": [0, 1], "bytes": 1 << 20, "unit": "GB/s",
                                      "values": [10.0, 10.1]}],
            "data": [], "nnodes": 2, "backend": "nccl" if views else "gloo",
            "nccl_transport": views}


def test_the_record_gets_transport_rows_in_its_link_stage_on_gpus_only():
    rows = acceptance.judge_record(_record(_views(SOCKET)), {}, None, "IB", "--expect-net IB")
    assert [(r.stage, r.subject, r.check, r.status) for r in rows if r.check == "transport"] \
        == [("link", "node 0", "transport", PASS), ("link", "node 1", "transport", FAIL)]
    assert acceptance.exit_code(rows) == 1
    gloo = acceptance.judge_record(_record(None), {}, None, "IB", "--expect-net IB")
    assert not any(r.check == "transport" for r in gloo)


def test_the_flag_wins_over_the_environment_and_names_itself():
    env = {"BENCH_EXPECT_NET": "Socket"}
    assert accept.expected_net("IB", env) == ("IB", "--expect-net IB")
    assert accept.expected_net(None, env) == ("Socket", "BENCH_EXPECT_NET=Socket")
    assert accept.expected_net(None, {}) == (None, None)


def test_measured_rows_judge_the_figures_files_transport(tmp_path):
    """The H200's real accept record (one node), given two nodes' views: bench accept's own
    reader turns them into rows beside the device rows."""
    from bench import record

    real = REPO / "results" / "reference" / "gpu-h200" / "call1" / "accept" / accept.FIGURES
    rec = {**json.loads(real.read_text().splitlines()[-1]), "nccl_transport": _views(SOCKET),
           "nnodes": 2}
    assert record.problem_of(rec) is None
    figures = tmp_path / accept.FIGURES
    figures.write_text(json.dumps(rec) + "\n")
    rows = accept.measured_rows(figures, {}, None, ("IB", "--expect-net IB"))
    assert [r.status for r in rows if r.check == "transport"] == [PASS, FAIL]
    assert any(r.stage == "device" for r in rows)


def test_a_bad_expect_net_is_one_line_and_exit_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "bench", "accept", "--out", str(tmp_path / "o"),
                          "--expect-net", "i b", "--launcher", "native", "--dry-run"],
                         cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "bench accept: error: --expect-net=i b: the network NCCL must choose between nodes: "
        "IB (InfiniBand or RoCE), Socket, or a network plugin's name"]
    assert not (tmp_path / "o").exists()
