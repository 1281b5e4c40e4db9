"""The acceptance's ``transport`` rows: per node, the network NCCL chose (a record's
``nccl_transport``, each rank's view of NCCL's own INFO lines) against the one expected.

  PASS  NCCL chose the expected network on every rank of the node (or, with nothing
        expected, anything but sockets between nodes)
  FAIL  it chose another (a silent fall-back to sockets where InfiniBand is expected), or
        its choice could not be read where one is expected
  WARN  nothing expected and NCCL chose sockets between nodes ("expected? give
        --expect-net"); InfiniBand without GPUDirect RDMA on its network connections;
        nothing captured where nothing is expected

Pure: record views in, rows out. A gloo job (``nccl_transport`` null) gets no row.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from bench import nccl_log
from bench.analysis.verdict import FAIL, PASS, WARN, Row

CHECK = "transport"
MAX_REASON = 1000


def _summary(views: Sequence[Mapping]) -> str:
    """``IB (mlx5_0:1/IB, mlx5_1:1/IB), GPUDirect RDMA on; P2P CUMEM/read, NET`` for a
    node's views (its first rank's devices; the transports of all)."""
    first = views[0]
    devices = [str(d) for d in (first.get("devices") or [])[:3]]
    network = first.get("network") or "no network"
    parts = [f"{network} ({', '.join(devices)})" if devices else str(network)]
    gdr = [v.get("gdr") for v in views]
    if any(g is not None for g in gdr):
        parts.append("GPUDirect RDMA " + ("on" if all(gdr) else "off"))
    transports = [t for t in nccl_log.TRANSPORTS
                  if any(t in (v.get("transports") or []) for v in views)]
    p2p = sorted({str(k) for v in views for k in (v.get("p2p") or [])})[:3]
    if transports:
        parts[-1] += "; " + ", ".join(f"P2P {'/'.join(p2p)}" if t == "P2P" and p2p else t
                                      for t in transports)
    return ", ".join(parts)


def _node_name(node: object) -> str:
    return f"node {node}" if node is not None else "node ?"


def judge(views: Sequence[Mapping] | None, nnodes: int | None, expected: str | None,
          source: str | None = None) -> list[Row]:
    """One row per node. ``expected``: the network required (``--expect-net``, else
    BENCH_EXPECT_NET), named in the reasons as ``source``; without it a node's own ranks'
    ``expected_net`` applies."""
    if not views:
        return []
    nodes: dict[object, list[Mapping]] = {}
    for view in views:
        nodes.setdefault(view.get("node_rank"), []).append(view)
    many = (nnodes or len(nodes)) > 1
    rows = []
    for node in sorted(nodes, key=lambda n: (n is None, n if isinstance(n, int) else 0)):
        status, reason = _judge_node(nodes[node], many, expected, source)
        reason = f"{_node_name(node)}: {reason}"
        rows.append(Row("link", _node_name(node), CHECK, "", None, None, status,
                        reason[:MAX_REASON]))
    return rows


def _judge_node(views: list[Mapping], many: bool, expected: str | None,
                source: str | None) -> tuple[str, str]:
    own = next((v.get("expected_net") for v in views if v.get("expected_net")), None)
    wanted = expected or own
    said = source if expected else f"{nccl_log.EXPECT_SETTING}={own} (the nodes')"
    missing = [v for v in views if not v.get("captured")]
    if missing:
        why = missing[0].get("reason") or "NCCL's INFO lines were not read"
        return (FAIL if wanted else WARN,
                f"NCCL's choice is unknown on {len(missing)} rank(s) ({why})"
                + (f", so {said} cannot be checked" if wanted else ""))
    summary = _summary(views)
    if wanted:
        bad = [v for v in views if not nccl_log.meets(wanted, v.get("network"))]
        if bad:
            chose = sorted({str(v.get("network") or "no network") for v in bad})
            return FAIL, (f"NCCL chose {'/'.join(chose)} on host {bad[0].get('hostname')} "
                          f"where {said} expects {wanted}: "
                          f"{nccl_log.fix_for(wanted)}")
        staged = [v for v in views if v.get("gdr") is False and "NET" in
                  (v.get("transports") or [])]
        if wanted.startswith("IB") and staged:
            return WARN, (f"NCCL chose {summary}, as {said} expects, but without GPUDirect "
                          "RDMA: its network traffic is staged through host memory; load "
                          "nvidia-peermem (or use a dma-buf capable kernel and driver)")
        return PASS, f"NCCL chose {summary}, as {said} expects"
    if many and any(v.get("network") == "Socket" for v in views):
        return WARN, (f"NCCL chose {summary} between nodes: TCP sockets, not RDMA. "
                      "Expected? give --expect-net Socket to say so, or --expect-net IB to "
                      "require InfiniBand")
    return PASS, f"NCCL chose {summary}; nothing expected (--expect-net)"
