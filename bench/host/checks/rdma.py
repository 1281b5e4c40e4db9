"""InfiniBand and RoCE (profile gpu-ib): ``ibv_devinfo`` inside the trainer image, with the
host's ``/dev/infiniband`` attached as the gpu-ib trainer gets it. What NCCL's IB transport
will see: the HCAs, their ports' state and link layer; or why it will see none and fall back
to TCP sockets (no RDMA device node on the host, no verbs in the image, no port up)."""
from __future__ import annotations

import re

from bench.host.checks import FAIL, PASS, Row
from bench.host.checks.remote import Hosts
from bench.shell import words

CHECK = "rdma"
DEVICES = "/dev/infiniband"
_HCA = re.compile(r"^hca_id:\s*(\S+)", re.MULTILINE)
_PORT = re.compile(r"^\s+port:\s*(\d+)", re.MULTILINE)
_STATE = re.compile(r"^\s+state:\s*(\S+)", re.MULTILINE)
_LINK = re.compile(r"^\s+link_layer:\s*(\S+)", re.MULTILINE)


def ibv_devinfo_argv(image: str) -> list[str]:
    """The image's ibv_devinfo with the HCAs attached, as `--profile gpu-ib` runs the trainer."""
    return ["docker", "run", "--rm", "--device", f"{DEVICES}:{DEVICES}", "--entrypoint",
            "ibv_devinfo", image]


def ports(text: str) -> list[tuple[str, str, str, str]]:
    """(HCA, port, state, link layer) for each port ibv_devinfo lists."""
    found = []
    starts = [(m.start(), m.group(1)) for m in _HCA.finditer(text)]
    for index, (start, hca) in enumerate(starts):
        block = text[start:starts[index + 1][0] if index + 1 < len(starts) else len(text)]
        port_starts = [(m.start(), m.group(1)) for m in _PORT.finditer(block)]
        for j, (at, port) in enumerate(port_starts):
            part = block[at:port_starts[j + 1][0] if j + 1 < len(port_starts) else len(block)]
            state, link = _STATE.search(part), _LINK.search(part)
            found.append((hca, port, state.group(1) if state else "?",
                          link.group(1) if link else "?"))
    return found


def _unmatched_hca(setting: str, hcas: list[str]) -> list[str]:
    """The HCA names of NCCL_IB_HCA that match none of ``hcas`` (NCCL matches a name as a
    prefix, or exactly after '='; an excluding '^' list is not checked)."""
    if not setting or setting.startswith("^"):
        return []
    exact = setting.startswith("=")
    names = [entry.split(":")[0] for entry in setting.lstrip("=").split(",") if entry]
    return [name for name in names
            if not any(hca == name if exact else hca.startswith(name) for hca in hcas)]


def rdma_row(job: Hosts, host: str) -> Row:
    """The ``rdma`` row: the HCAs the image sees on ``host``, or why it sees none."""
    out = job.run(host, words(ibv_devinfo_argv(job.image)), timeout=120)
    said = (out.stdout + out.stderr).strip()
    if out.returncode != 0:
        return Row(host, CHECK, FAIL, _failure(job, host, said, out.returncode))
    found = ports(out.stdout)
    hcas = sorted({hca for hca, *_ in found})
    if not found:
        return Row(host, CHECK, FAIL, "ibv_devinfo in the image lists no HCA port: "
                   f"{(said.splitlines() or ['no output'])[-1][:160]}")
    active = [p for p in found if p[2].startswith("PORT_ACTIVE")]
    listed = ", ".join(f"{hca} port {port} {state.removeprefix('PORT_')} "
                       f"{'RoCE' if link == 'Ethernet' else link}"
                       for hca, port, state, link in found)
    if not active:
        return Row(host, CHECK, FAIL, f"no HCA port is active ({listed}): NCCL uses only "
                   "active ports and would fall back to sockets; check the cable, the "
                   "switch and the subnet manager (opensm) for InfiniBand")
    missing = _unmatched_hca(job.settings.get("NCCL_IB_HCA", ""), hcas)
    if missing:
        return Row(host, CHECK, FAIL, f"NCCL_IB_HCA={job.settings['NCCL_IB_HCA']} names "
                   f"{', '.join(missing)}, which ibv_devinfo does not list ({', '.join(hcas)}):"
                   " NCCL would use no HCA; name one of those")
    return Row(host, CHECK, PASS, f"{len(hcas)} HCA(s) in the image: {listed}")


def _failure(job: Hosts, host: str, said: str, code: int) -> str:
    """Why ibv_devinfo did not run or found nothing, and the fix, from what it said."""
    if "error gathering device information" in said or "no such file or directory" in said \
            and DEVICES in said:
        return (f"no {DEVICES} on {host}: load the RDMA drivers there (ib_uverbs and the "
                "HCA's, e.g. mlx5_ib), or use PROFILE=gpu for TCP sockets")
    if "executable file not found" in said or code == 127:
        return (f"ibv_devinfo is not in {job.image}: rebuild it with `make build` (the GPU "
                "image installs rdma-core's libibverbs1, ibverbs-providers, librdmacm1 and "
                "ibverbs-utils); without verbs NCCL falls back to sockets")
    if "couldn't load driver" in said:
        return (f"the image's verbs cannot load {host}'s HCA driver ({_last(said)}): "
                "rebuild with `make build` (ibverbs-providers)")
    if "No IB devices found" in said or "Failed to get IB devices list" in said:
        return (f"the container sees no HCA ({_last(said)}): load ib_uverbs and the HCA's "
                f"driver on {host} (ibv_devinfo there lists them), then check again")
    return f"ibv_devinfo in {job.image} failed (exit {code}): {_last(said)}"


def _last(said: str) -> str:
    return (said.splitlines() or ["no output"])[-1][:160]
