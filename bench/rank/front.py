"""A rank verb's command line, checked before torch is imported.

``bench train`` and ``bench allreduce`` (and ``torchrun -m bench.rank.train``, ``.allreduce``
and ``.accept``) parse and check their whole config here first: a wrong value is one line
and exit 2 before anything runs or is written. Nothing here imports torch, so that line
comes at once. Importing torch takes about 3 s of CPU on a small machine (2.8 s on the
project's 2-CPU VM: ``python -X importtime -c "import torch"``); a mistyped flag should not
wait for it. Only a config that passed is handed to the verb's module, which imports torch.
"""
from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from bench import nccl_log
from bench.options import ConfigError

# Each rank verb's module -> its config class (module, class): both import no torch, so the
# front door can check a command line without loading the verb's module.
CONFIGS = {
    "bench.rank.train": ("bench.config", "TrainConfig"),
    "bench.rank.allreduce": ("bench.allreduce_config", "AllreduceConfig"),
    "bench.rank.accept": ("bench.accept_config", "AcceptConfig"),
}


def parse(module: str, argv: list[str] | None, prog: str) -> Any | None:
    """``module``'s config from ``argv``; None once a wrong value's one line is printed."""
    config_module, name = CONFIGS[module]
    config_class = getattr(importlib.import_module(config_module), name)
    try:
        cfg = config_class.from_args(argv, prog)
        nccl_log.expected_net(os.environ)   # a bad BENCH_EXPECT_NET: before anything runs
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return None
    return cfg


def main(module: str, argv: list[str] | None, prog: str,
         run: Callable[[Any], int] | None = None) -> int:
    """Check the command line, then run its config: with ``run`` (the entry point of a
    module already loaded, as torchrun's ``-m`` loads it), else ``module``'s own ``run``,
    imported only now. Exit 2 on a wrong value, else the run's code."""
    cfg = parse(module, argv, prog)
    if cfg is None:
        return 2
    if run is None:
        run = importlib.import_module(module).run
    return run(cfg)
