"""The node contract (bench/contract.py) against the files that must follow it: the Compose
trainer service, the image entrypoint and the documented settings. A variable or torchrun
flag added in one place and not the others fails here."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from bench.host import contract
from bench.host.launchers.base import JobSpec
from bench.host.settings import INTERPOLATED
from bench.topology import Topology
from conftest import REPO

COMPOSE = yaml.safe_load((REPO / "compose" / "docker-compose.yml").read_text())
ENTRYPOINT = (REPO / "docker" / "node-entrypoint.sh").read_text()
ENV_EXAMPLE = (REPO / "compose" / ".env.example").read_text()


def _trainer() -> dict:
    return COMPOSE["x-trainer"]


def _interpolated(text: str) -> set[str]:
    return set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", text))


def test_every_node_variable_reaches_the_trainer_service():
    trainer = _trainer()
    environment = trainer["environment"]
    mounted = " ".join(trainer["volumes"])
    for name in contract.NODE_VARIABLES:
        if name == "RESULTS_DIR":
            assert "${RESULTS_DIR" in mounted and f":{contract.CONTAINER_RESULTS}" in mounted
        elif name == "RESULTS_NAME":
            assert environment["RESULTS_FILE"].startswith(f"{contract.CONTAINER_RESULTS}/"
                                                          "${RESULTS_NAME")
        else:
            assert environment.get(name, "").startswith("${" + name), name


def test_the_service_takes_nothing_from_the_shell_the_contract_does_not_name():
    names = set()
    for value in [*_trainer()["environment"].values(), *_trainer()["volumes"]]:
        names |= _interpolated(str(value))
    assert names <= set(contract.NODE_VARIABLES), names - set(contract.NODE_VARIABLES)
    assert set(contract.NODE_VARIABLES) <= set(INTERPOLATED), "settings must know them"


def test_the_entrypoint_reads_every_variable_that_reaches_the_container():
    inside = set(contract.NODE_VARIABLES) - {"RESULTS_DIR", "RESULTS_NAME", "BENCH_IMAGE_ID",
                                             "BENCH_IMAGE_DIGEST"}
    read = set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", ENTRYPOINT))
    assert inside <= read, inside - read
    assert "RESULTS_FILE" in read


def _entrypoint_torchrun_flags() -> list[str]:
    agent = "exec python3 -m bench.rank.torchrun"
    start = ENTRYPOINT.index(agent) + len(agent)
    command = ENTRYPOINT[start:].replace("\\\n", " ").splitlines()[0]
    return [word for word in shlex.split(command, posix=False) if word.startswith("-")]


def test_the_entrypoint_starts_the_contract_argv():
    """Same torchrun flags, in the same order, as every other launcher's nodes."""
    node = JobSpec(job_id="j", module="bench.rank.train", workload_args=(),
                   topology=Topology(2, 1), master_port=1, rdzv_timeout=5, results=Path("r"),
                   log_dir=Path("l"), deadline_s=60).nodes[0]
    argv = contract.torchrun_argv(node, master_addr="a", master_port=node.master_port)
    contract_flags = [w for w in argv[argv.index("bench.rank.torchrun") + 1:]
                      if w.startswith("-")]
    assert _entrypoint_torchrun_flags() == contract_flags


def test_the_settings_file_documents_what_a_user_sets():
    documented = set(re.findall(r"^#?\s*([A-Z_][A-Z0-9_]*)=", ENV_EXAMPLE, re.MULTILINE))
    for name in ("NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT",
                 "RDZV_TIMEOUT", "BENCH_MODULE", "BENCH_ARGS", "RESULTS_DIR", "RESULTS_NAME"):
        assert name in documented, name


def test_node_env_is_the_contract_vocabulary():
    node = contract.NodeSpec(rank=1, nnodes=2, nproc=4, master_port=29500, rdzv_timeout=60,
                             job_id="j1", module="bench.rank.train",
                             workload_args=("--steps", "2 3"), results=Path("/r/x.jsonl"),
                             workdir=REPO, devices="4,5,6,7")
    env = contract.node_env(node, master_addr="10.0.0.1", master_port=node.master_port,
                            results_dir="/r", results_name="x.jsonl", image_id="sha256:1")
    assert set(env) == set(contract.NODE_VARIABLES)
    assert shlex.split(env["BENCH_ARGS"]) == ["--steps", "2 3"]
    assert contract.project_name("AbC-1", 2) == "bench-abc-1-node2"


def test_the_workloads_a_node_accepts_are_the_matrixs():
    from bench.host.matrix import WORKLOADS
    from bench.host.settings import WORKLOAD_MODULES

    assert set(WORKLOADS.values()) == set(WORKLOAD_MODULES)
    assert f"BENCH_MODULE={WORKLOADS['train']}" in ENV_EXAMPLE


def test_an_old_module_name_says_where_it_moved():
    import pytest as _pytest

    from bench.host.settings import NodeSettings, load
    from bench.options import ConfigError

    values = load(REPO / "compose" / ".env.example")
    values["BENCH_MODULE"] = "bench.train"
    with _pytest.raises(ConfigError, match="BENCH_MODULE=bench.train: it moved: "
                                           "bench.rank.train"):
        NodeSettings.parse(values, "cpu")
