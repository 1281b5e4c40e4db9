"""NCCL's INFO lines to the transport it chose (bench.nccl_log): canned logs, a real one
from an H200 among them, give the expected dict; any text at all never raises and gives
bounded, printable values."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import nccl_log
from bench.options import ConfigError
from conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "nccl"


def _log(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_the_real_h200_log_one_rank_no_infiniband():
    """NCCL 2.28.9 on one H200 with no HCA: IB fails to initialise, Socket on lo is the
    network, GPUDirect RDMA is off for it, and one rank connects no channel."""
    assert nccl_log.parse(_log("h200-one-rank-socket.log")) == {
        "network": "Socket", "gdr": False, "transports": [], "p2p": [], "nvls": None,
        "version": "2.28.9+cuda13.0", "devices": ["lo:127.0.0.1<0>"]}


def test_two_nodes_over_infiniband_with_gpudirect_rdma():
    assert nccl_log.parse(_log("ib-two-nodes-gdr.log")) == {
        "network": "IB", "gdr": True, "transports": ["P2P", "NET", "NVLS"],
        "p2p": ["CUMEM/read"], "nvls": True, "version": "2.28.9+cuda13.0",
        "devices": ["mlx5_0:1/IB", "mlx5_1:1/IB"]}


def test_a_fall_back_to_sockets_between_nodes_and_shm_inside_one():
    assert nccl_log.parse(_log("socket-fallback-shm.log")) == {
        "network": "Socket", "gdr": False, "transports": ["SHM", "NET"], "p2p": [],
        "nvls": None, "version": "2.28.9+cuda13.0", "devices": ["eno1:192.168.1.12<0>"]}


LINE = "h:1:1 [0] NCCL INFO "


@pytest.mark.parametrize("message, p2p", [
    ("Channel 00/1 : 0[0] -> 1[1] via P2P/direct pointer/read", "direct pointer/read"),
    ("Channel 03/0 : 2[2] -> 3[3] via P2P/IPC/read/CE", "IPC/read/CE"),
    ("Channel 03/0 : 2[2] -> 3[3] via P2P/IPC", "IPC"),
    ("Channel 01/0 : 0[0] -> 3[3] via P2P/indirect/1[1]/read", "indirect/read"),
    ("Channel 01/0 : 0[4] -> 1[5] via P2P/MNNVL/read", "MNNVL/read"),
])
def test_each_p2p_kind_nccl_prints(message, p2p):
    view = nccl_log.parse(LINE + message)
    assert view["transports"] == ["P2P"] and view["p2p"] == [p2p]


def test_gdr_is_off_once_any_network_connection_stages_through_the_host():
    text = "\n".join(LINE + m for m in (
        "Using network IB", "NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'",
        "Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/0/GDRDMA",
        "Channel 01/0 : 1[1] -> 0[0] [send] via NET/IB/0(2)"))
    assert nccl_log.parse(text)["gdr"] is False


def test_the_last_communicators_network_and_an_assigned_plugin_without_it():
    assert nccl_log.parse(f"{LINE}Using network Socket\n{LINE}Using network IB")["network"] \
        == "IB"
    assert nccl_log.parse(f"{LINE}Assigned NET plugin AWS Libfabric to comm")["network"] \
        == "AWS Libfabric"
    assert nccl_log.parse(f"{LINE}CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA")[
        "transports"] == ["COLLNET"]
    assert nccl_log.parse(f"{LINE}NVLS multicast support is not available on dev 1")[
        "nvls"] is False


def test_lines_without_nccls_mark_are_not_read():
    assert nccl_log.parse("Using network IB\n[bench] Using network IB") == nccl_log.EMPTY


_NCCL_WORDS = st.sampled_from([
    "NCCL INFO ", "Using network ", "Assigned NET plugin ", " to comm", "NET/IB : Using ",
    "NET/Socket : ", "GPU Direct RDMA Enabled for HCA ", "Channel ", "00/0 : ", "0[0] -> ",
    "1[1] ", "[send] ", "via ", "P2P/", "NET/IB/0/GDRDMA", "SHM/direct", "CollNet ",
    "COLLNET/", "NVLS multicast support is ", "not ", "available", " nvls channels",
    "NCCL version ", "[0]mlx5_0:1/IB", "[RO]; OOB ", "9" * 5000, "\x00", "\u202e", "\r",
    "\n", ";", "/", "%", "é"])
_TEXT = st.one_of(
    st.text(max_size=400),
    st.lists(st.one_of(_NCCL_WORDS, st.text(max_size=12)), max_size=40).map("".join))


def _bounded(value: object) -> bool:
    return value is None or isinstance(value, bool) or (
        isinstance(value, str) and 0 < len(value) <= nccl_log.MAX_TEXT and value.isprintable())


@given(_TEXT)
def test_any_text_parses_to_bounded_printable_values(text):
    view = nccl_log.parse(text)
    assert set(view) == set(nccl_log.EMPTY)
    for key in ("network", "gdr", "nvls", "version"):
        assert _bounded(view[key]), (key, view[key])
    for key in ("p2p", "devices"):
        assert len(view[key]) <= nccl_log.MAX_ITEMS and all(map(_bounded, view[key]))
    assert set(view["transports"]) <= set(nccl_log.TRANSPORTS)


@given(st.lists(st.sampled_from(_log("ib-two-nodes-gdr.log").splitlines()), max_size=30),
       st.integers(min_value=0, max_value=200))
def test_shuffled_and_cut_real_lines_never_raise(lines, cut):
    nccl_log.parse("\n".join(line[:cut] for line in lines))


# --- BENCH_EXPECT_NET ---------------------------------------------------------------------

def test_the_expected_network_is_a_plain_name():
    assert nccl_log.expected_net({}) is None
    assert nccl_log.expected_net({"BENCH_EXPECT_NET": "IB"}) == "IB"
    with pytest.raises(ConfigError, match=r"BENCH_EXPECT_NET=ib --x: the network NCCL must"):
        nccl_log.expected_net({"BENCH_EXPECT_NET": "ib --x"})


def _view(network, **extra):
    return {"rank": 2, "node_rank": 1, "hostname": "gpu2", "captured": True, "reason": None,
            "expected_net": "IB", **nccl_log.EMPTY, "network": network, **extra}


def test_a_fall_back_to_sockets_is_one_line_naming_setting_choice_and_fix():
    line = nccl_log.mismatch([_view("IB"), _view("Socket")])
    assert line is not None and "\n" not in line
    assert line.startswith("NCCL chose Socket on node 1 (host gpu2, rank 2) where "
                           "BENCH_EXPECT_NET=IB expects IB: no InfiniBand device")
    assert "ibv_devinfo" in line
    assert nccl_log.mismatch([_view("IB"), _view("IBext_v8")]) is None
    assert nccl_log.mismatch([_view("Socket", expected_net=None)]) is None
    assert "cannot be checked" in nccl_log.mismatch(
        [_view(None, captured=False, reason="NCCL_DEBUG=WARN is set")])
    assert "NCCL named no network" in nccl_log.mismatch([_view(None)])
