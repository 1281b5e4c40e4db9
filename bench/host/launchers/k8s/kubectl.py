"""The one way to the cluster: kubectl, argv lists only, with the options' context and
namespace; a missing kubectl or a silent API server is an answer, not an exception."""
from __future__ import annotations

import json
import subprocess

from bench.host.launchers.k8s.options import K8sOptions


def kubectl(options: K8sOptions, *args: str, timeout: float = 120,
            namespaced: bool = True) -> subprocess.CompletedProcess:
    argv = ["kubectl"]
    if options.context:
        argv.append(f"--context={options.context}")
    if namespaced:
        argv.append(f"--namespace={options.namespace}")
    try:
        return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, "", "kubectl is not installed")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"no answer in {timeout:g} s")


def json_of(out: subprocess.CompletedProcess) -> dict | None:
    if out.returncode != 0:
        return None
    try:
        value = json.loads(out.stdout)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def last_line(out: subprocess.CompletedProcess) -> str:
    return ((out.stderr or out.stdout).strip().splitlines() or [f"exit {out.returncode}"])[-1]
