"""``python -m bench doctor --hosts h1,h2``: is this cluster ready for a multi-node job?

One row per host and check, PASS, WARN or FAIL with the fix; exit status 1 on any FAIL.
The first host leads (MASTER_ADDR), as in the SSH fan-out. Checks, per host:

  ssh        passwordless, non-interactive SSH with a known host key
  docker     the Docker engine answers and Compose is installed
  image      the trainer image is there; its id and torch/CUDA/NCCL versions agree across hosts
  gpu        the driver is at least the flavour's minimum (docker/cuda-flavours.tsv), and
             torch inside the image, run with the GPUs attached (docker run --gpus all),
             sees CUDA and at least --gpus-per-node devices; a refusal such as
             'unsatisfied condition: cuda>=13.0' names the driver floor and the build line
             of a flavour this driver runs, as scripts/check-gpu.sh does. WARN on a host
             without NVIDIA driver; not checked with --gpus-per-node 0 (a CPU job)
  interface  the interface routing to MASTER_ADDR exists and matches NCCL/GLOO_SOCKET_IFNAME
  rendezvous MASTER_PORT on the first host is reachable from this host
  shm        /dev/shm is at least 1 GiB (the trainer containers share the host's: ipc host)
  dataset    the dataset volume mounts in the image and matches its manifest
  resolve    every host name resolves on this host
  clock      the clock is within 0.5 s of this machine's (WARN to 5 s, FAIL beyond)
  exposure   WARN where MASTER_ADDR or the address of the NCCL/gloo socket interface is
             public (globally routable): the c10d store and NCCL/gloo have no
             authentication and exchange pickled objects, so anyone who reaches those
             ports can run code on the nodes. A warning, not a failure: a firewall may
             close them.

Every host is a strict host name (``bench.topology.parse_hosts``) and every ssh call ends
ssh's options with ``--`` before the host, so no host can become an ssh option.

``python -m bench doctor --slurm [--partition P]`` checks a Slurm cluster instead: the
controller answers, the partition exists, its nodes' states, munge, and that every node
runs the same venv (or, with --runtime compose, the same image) through srun.

``python -m bench doctor --k8s --image IMAGE [--profile gpu]`` checks a Kubernetes cluster:
the context answers, the job may be created, nodes report allocatable ``nvidia.com/gpu``
(gpu profile), the results claim is bound, the image can be pulled (a probe pod with
--pull-probe), and the NFS server of the settings answers.
"""
from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from tabulate import tabulate

from bench.config import OneLineErrorParser
from bench.host.checks import FAIL, PASS, WARN, Row
from bench.host.launchers.ssh import ssh_argv, ssh_base
from bench.host.settings import read_env_file
from bench.options import MAX_PORT, MIN_PORT, ConfigError, check_image, finite_float
from bench.shell import words
from bench.topology import host_address, parse_hosts, shown

SHM_MINIMUM = 1 << 30
SSH_PROBE_S = 30          # the first contact: a host that does not answer in 30 s is down
MAX_CHECK_TIMEOUT_S = 3600
DEFAULT_MASTER_PORT = 29500
# --dataset names one directory under the image's /data: a plain name, nothing more.
_DATASET = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}", re.ASCII)
_ADDRESS = re.compile(r"\binet6? ([0-9A-Fa-f:.]+)/")
EXPOSED = ("the c10d store and NCCL/gloo have no authentication and exchange pickled "
           "objects: keep the job on a private network, or firewall MASTER_PORT and the "
           "NCCL/gloo ports to the nodes")
# torch/CUDA/NCCL as one comparable string. NCCL's version is linked in, so it reads
# without a GPU; a CPU build has none.
_NCCL = ("n = torch.cuda.nccl.version() if hasattr(torch._C, '_nccl_version') else None; "
         "nccl = '.'.join(map(str, n)) if isinstance(n, tuple) else n")
VERSIONS = f"import torch; {_NCCL}; print(torch.__version__, torch.version.cuda, nccl)"
# Run in the image with the GPUs attached: what torch itself can use, and its versions.
GPU_PROBE = (f"import json, torch; {_NCCL}; ok = torch.cuda.is_available(); "
             "print(json.dumps({'available': ok, 'count': torch.cuda.device_count() if ok "
             "else 0, 'torch': torch.__version__, 'cuda': torch.version.cuda, 'nccl': nccl}))")
# What nvidia-container-cli says when the image's NVIDIA_REQUIRE_CUDA is above the driver's.
_CUDA_REFUSAL = re.compile(r"unsatisfied condition: cuda\s*>=\s*([0-9]+(?:\.[0-9]+)?)")
FLAVOURS = Path(__file__).resolve().parents[2] / "docker" / "cuda-flavours.tsv"
# Remote checks that need a shell: fixed text, each value an argument ("$1", "$@") of
# ``sh -c SCRIPT bench-doctor VALUE...``, rendered with bench.shell.words.
ROUTE = ('ip route get "$(getent ahostsv4 "$1" | awk \'NR==1{print $1}\')" '
         '| grep -o \'dev [^ ]*\' | head -n 1')
ANY_LINK = 'for name; do ip link show "$name" >/dev/null 2>&1 && exit 0; done; exit 1'
UNRESOLVED = 'for name; do getent ahosts "$name" >/dev/null || echo "$name"; done'
TCP_OPEN = ': <"/dev/tcp/$1/$2"'
# A listener on the rendezvous port (sys.argv[1]) for the other hosts to reach.
LISTENER = ("import socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
            "socket.SO_REUSEADDR, 1); s.bind(('', int(sys.argv[1]))); s.listen(16); "
            "print('listening', flush=True)\nwhile True: s.accept()[0].close()")


def shell(script: str, *values: str) -> str:
    """``sh -c SCRIPT`` with ``values`` as its arguments, as one quoted line."""
    return words(["sh", "-c", script, "bench-doctor", *values])


@dataclasses.dataclass(frozen=True, slots=True)
class Flavour:
    """A row of docker/cuda-flavours.tsv: the torch wheels' CUDA line and its driver floor."""

    name: str
    cuda: str
    min_driver: int


def flavours(table: Path = FLAVOURS) -> dict[str, Flavour]:
    rows = {}
    for line in table.read_text().splitlines():
        fields = line.split("\t")
        if line.startswith("#") or len(fields) < 4:
            continue
        rows[fields[0]] = Flavour(fields[0], fields[1], int(fields[2]))
    return rows


def flavour_for_driver(major: int, table: dict[str, Flavour]) -> Flavour | None:
    """The newest CUDA line a driver runs (``default`` is an alias, never named)."""
    fits = [f for f in table.values() if f.name != "default" and f.min_driver <= major]
    return max(fits, key=lambda f: _cuda_key(f.cuda), default=None)


def flavour_for_cuda(cuda: str, table: dict[str, Flavour]) -> Flavour | None:
    """The named flavour of CUDA line ``cuda`` (what an image asking for cuda>=X was built
    for), or None where the table has no such line. ``13`` is 13.0."""
    wanted = _cuda_key(cuda if "." in cuda else cuda + ".0")
    return next((f for f in table.values()
                 if f.name != "default" and _cuda_key(f.cuda) == wanted), None)


def _cuda_key(cuda: str) -> tuple[int, ...]:
    return tuple(int(x) for x in cuda.split("."))


def driver_major(driver: str) -> int | None:
    """The major number of an nvidia-smi driver version (580 of 580.95.05), or None."""
    major = driver.split(".")[0]
    return int(major) if major.isascii() and major.isdigit() else None


def driver_advice(driver: str, flavour: Flavour, table: dict[str, Flavour]) -> str:
    """What to do when ``driver`` is below ``flavour``'s floor: the exact build line of a
    flavour it does run. Word for word what scripts/check-gpu.sh prints (one wording:
    tests/test_doctor_gpu.py runs both)."""
    works = flavour_for_driver(driver_major(driver) or 0, table)
    if works is None:
        return (f"driver {driver} is older than every flavour's minimum "
                f"(docker/cuda-flavours.tsv): update the driver to {flavour.min_driver} or "
                "newer")
    return (f"driver {driver} is older than {flavour.min_driver}, the minimum for "
            f"TORCH_FLAVOUR={flavour.name} (CUDA {flavour.cuda}). Update the driver, or build "
            f"for this one: make build TORCH_FLAVOUR={works.name} (then pass "
            f"TORCH_FLAVOUR={works.name} to the bench targets too)")


def refusal_advice(said: str, driver: str, flavour: Flavour,
                   table: dict[str, Flavour]) -> str | None:
    """The fix for a container the NVIDIA runtime refused with ``unsatisfied condition:
    cuda>=X`` (the image needs a newer driver), or None for any other failure. The floor
    is the one of the CUDA line the image asks for: --torch-flavour may not be the image's."""
    match = _CUDA_REFUSAL.search(said)
    if match is None:
        return None
    cuda = match.group(1)
    needed = flavour_for_cuda(cuda, table)
    head = f"the image needs CUDA {cuda} (the NVIDIA runtime refused it: cuda>={cuda}): "
    mismatch = "" if needed is None or needed.cuda == flavour.cuda else (
        f"; --torch-flavour {flavour.name} (CUDA {flavour.cuda}) is not the image's "
        f"flavour, {needed.name}")
    major = driver_major(driver)
    if needed is None:
        works = flavour_for_driver(major or 0, table)
        fix = (f"make build TORCH_FLAVOUR={works.name} (then pass TORCH_FLAVOUR={works.name} "
               "to the bench targets too)" if works else "update the driver")
        return head + (f"docker/cuda-flavours.tsv has no CUDA {cuda} line, so the image was "
                       f"not built from it; for driver {driver}: {fix}")
    if major is not None and major >= needed.min_driver:
        return head + (f"driver {driver} meets its minimum {needed.min_driver}, so the "
                       "container toolkit misreads it: update nvidia-container-toolkit "
                       "(scripts/install-host.sh gpu) and restart Docker") + mismatch
    return head + driver_advice(driver, needed, table) + mismatch


def gpu_probe_argv(image: str) -> list[str]:
    """The image's torch with every GPU attached, as `docker compose --profile gpu` runs it."""
    return ["docker", "run", "--rm", "--gpus", "all", "--entrypoint", "python3", image,
            "-c", GPU_PROBE]


class Doctor:
    def __init__(self, hosts: list[str], image: str, settings: dict[str, str],
                 ssh_config: Path | None, dataset: str, master_port: int,
                 timeout: float = 300, flavour: str = "default", gpus_per_node: int = 1):
        self.hosts, self.image, self.settings = hosts, image, settings
        self.table = flavours()
        self.flavour, self.gpus_per_node = self.table[flavour], gpus_per_node
        self.ssh = ssh_base(ssh_config)
        self.dataset, self.master_port, self.timeout = dataset, master_port, timeout
        self.master = host_address(hosts[0])  # MASTER_ADDR: the first host, without user@
        self.rows: list[Row] = []
        self.reachable: list[str] = []

    def argv(self, host: str, command: str) -> list[str]:
        """The ssh command line for ``command`` on ``host``: ``--`` right before the host."""
        return ssh_argv(self.ssh, host, command)

    def run(self, host: str, command: str,
            timeout: float | None = None) -> subprocess.CompletedProcess:
        """``command`` on ``host`` over ssh; a check that outlives ``timeout`` (default:
        --timeout) reads as exit status 124, as timeout(1) says it."""
        limit = min(timeout, self.timeout) if timeout else self.timeout
        argv = self.argv(host, command)
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(argv, 124, "", f"no answer in {limit:g} s")

    def add(self, host: str, check: str, result: str, detail: str) -> None:
        self.rows.append(Row(host, check, result, detail))

    def check_all(self) -> list[Row]:
        for host in self.hosts:
            if self.check_ssh(host):
                self.reachable.append(host)
        images = {}
        for host in self.reachable:
            self.check_docker(host)
            images[host] = self.check_image(host)
            if images[host]:
                with_gpus = self.check_gpu(host)
                if with_gpus:  # the NCCL version only shows with the GPUs attached
                    images[host] = (images[host][0], with_gpus)
                self.check_dataset(host)
            devices = self.check_interface(host)
            self.check_exposure(host, devices)
            self.check_shm(host)
            self.check_resolve(host)
            self.check_clock(host)
        self.check_same_image(images)
        self.check_rendezvous()
        return self.rows

    def check_ssh(self, host: str) -> bool:
        out = self.run(host, "true", timeout=SSH_PROBE_S)
        if out.returncode == 124 and not out.stdout and out.stderr.startswith("no answer"):
            self.add(host, "ssh", FAIL, f"{out.stderr}: is the host up and sshd running?")
            return False
        if out.returncode == 0:
            self.add(host, "ssh", PASS, "passwordless, host key known")
            return True
        reason = (out.stderr.strip().splitlines() or ["exit " + str(out.returncode)])[-1]
        self.add(host, "ssh", FAIL, f"{reason}; {_ssh_fix(out.stderr, host)}")
        return False

    def check_docker(self, host: str) -> None:
        out = self.run(host, "docker info >/dev/null 2>&1 && (docker compose version "
                       ">/dev/null 2>&1 || docker-compose version >/dev/null 2>&1)")
        if out.returncode == 0:
            self.add(host, "docker", PASS, "engine answers, Compose installed")
        else:
            self.add(host, "docker", FAIL, "Docker or Compose missing or not running: "
                     "scripts/install-host.sh docker, then scripts/ensure-docker.sh")

    def check_image(self, host: str) -> tuple[str, str] | None:
        ident = self.run(host, words(["docker", "image", "inspect", "-f", "{{.Id}}",
                                      self.image]))
        if ident.returncode != 0:
            self.add(host, "image", FAIL, f"image {self.image} missing on {host}: run make "
                     "build there, or docker save it here and docker load it there")
            return None
        versions = self.run(host, words(["docker", "run", "--rm", "--entrypoint", "python3",
                                         self.image, "-c", VERSIONS]), timeout=300)
        found = versions.stdout.strip() if versions.returncode == 0 else "unreadable"
        self.add(host, "image", PASS, f"{ident.stdout.strip()[:19]}, torch/CUDA/NCCL {found}")
        return ident.stdout.strip(), found

    def check_same_image(self, images: dict[str, tuple[str, str] | None]) -> None:
        present = {host: found for host, found in images.items() if found}
        if len(set(present.values())) > 1:
            for host, (image_id, versions) in present.items():
                self.add(host, "image", FAIL, f"differs across hosts: {image_id[:19]} "
                         f"({versions}); build or load the same image everywhere")

    def check_gpu(self, host: str) -> str | None:
        """The GPU checks; returns torch/CUDA/NCCL as torch sees them with the GPUs attached
        (None where that could not be read)."""
        if self.gpus_per_node == 0:
            self.add(host, "gpu", PASS, "--gpus-per-node 0: a CPU job, GPUs not checked")
            return None
        driver = self.check_driver(host)
        if driver is None:
            return None
        out = self.run(host, words(gpu_probe_argv(self.image)), timeout=300)
        if out.returncode != 0:
            self.add(host, "gpu", FAIL, self.probe_failure((out.stdout + out.stderr).strip(),
                                                           driver))
            return None
        try:
            found = json.loads(out.stdout.strip().splitlines()[-1])
            versions = f"{found['torch']} {found['cuda']} {found['nccl']}"
            available, count = bool(found["available"]), int(found["count"])
        except (ValueError, IndexError, KeyError, TypeError):
            self.add(host, "gpu", FAIL, f"unreadable GPU probe output: {out.stdout[:120]!r}")
            return None
        if not available:
            self.add(host, "gpu", FAIL, f"torch {found['torch']} (CUDA {found['cuda']}) in "
                     f"{self.image} sees no GPU although nvidia-smi reports driver {driver}: "
                     "update nvidia-container-toolkit (1.17.5 or newer puts the image's CUDA "
                     "compat libraries in place), and check that the image was built for "
                     f"this driver (--torch-flavour {self.flavour.name}, "
                     "docker/cuda-flavours.tsv)")
        elif count < self.gpus_per_node:
            self.add(host, "gpu", FAIL, f"{count} GPU(s) visible to torch, --gpus-per-node "
                     f"{self.gpus_per_node} needed: check nvidia-smi -L on {host}, or lower "
                     "--gpus-per-node")
        else:
            self.add(host, "gpu", PASS, f"{count} GPU(s) usable by torch {found['torch']}, "
                     f"CUDA {found['cuda']}, NCCL {found['nccl']}; driver {driver} >= "
                     f"{self.flavour.min_driver} (TORCH_FLAVOUR={self.flavour.name})")
        return versions

    def check_driver(self, host: str) -> str | None:
        """The host's driver version when it is at least the flavour's floor; else a row
        (WARN on a host without NVIDIA driver, FAIL otherwise) and None."""
        smi = self.run(host, "nvidia-smi --query-gpu=driver_version --format=csv,noheader")
        said = (smi.stdout + smi.stderr).strip()
        if smi.returncode == 127:  # the shell's "command not found"
            self.add(host, "gpu", WARN, "no NVIDIA driver (nvidia-smi not found): a CPU host "
                     "(gloo only)")
            return None
        if smi.returncode != 0:
            # nvidia-smi is there but cannot reach the driver: a GPU host torch cannot use.
            last = (said.splitlines() or [f"exit {smi.returncode}"])[-1][:120]
            self.add(host, "gpu", FAIL, f"nvidia-smi fails on {host}: {last}: reload the "
                     "driver (after a driver update, a library mismatch needs a reboot)")
            return None
        driver = (smi.stdout.strip().splitlines() or [""])[0].strip()
        major = driver_major(driver)
        if major is None:
            self.add(host, "gpu", FAIL, f"nvidia-smi reports no driver version ('{driver}'): "
                     "check the driver with nvidia-smi")
            return None
        if major < self.flavour.min_driver:
            self.add(host, "gpu", FAIL, driver_advice(driver, self.flavour, self.table))
            return None
        return driver

    def probe_failure(self, said: str, driver: str) -> str:
        """Why the GPU probe's container did not run, and the fix, from what Docker said."""
        refused = refusal_advice(said, driver, self.flavour, self.table)
        if refused:
            return refused
        if "could not select device driver" in said or "unknown runtime" in said:
            return ("Docker cannot give containers the GPUs: install nvidia-container-toolkit "
                    "(scripts/install-host.sh gpu), then restart Docker")
        last = (said.splitlines() or ["no output"])[-1][:160]
        return f"the GPU probe (docker run --gpus all {self.image}) failed: {last}"

    def check_interface(self, host: str) -> list[str]:
        """The interface checks; returns the interfaces NCCL/gloo will use on ``host``."""
        route = self.run(host, shell(ROUTE, self.master))
        device = route.stdout.strip().removeprefix("dev ").strip()
        if not device:
            self.add(host, "interface", FAIL, f"no route to MASTER_ADDR {self.master}")
            return []
        used = []
        for variable in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            wanted = self.settings.get(variable, "")
            if not wanted:
                self.add(host, "interface", WARN, f"{variable} unset: the library guesses; "
                         f"set {variable}={device} (the route to {self.master})")
                used.append(device)
                continue
            names = [n.lstrip("=") for n in wanted.split(",") if n and not n.startswith("^")]
            exists = self.run(host, shell(ANY_LINK, *names))
            if exists.returncode != 0:
                self.add(host, "interface", FAIL, f"{variable}={wanted}: no such interface "
                         f"on {host}; the route to {self.master} uses {device}")
            elif device not in names:
                self.add(host, "interface", FAIL, f"{variable}={wanted} but the route to "
                         f"{self.master} uses {device}: set {variable}={device}")
                used.extend(names)
            else:
                self.add(host, "interface", PASS, f"{variable}={wanted} routes to {self.master}")
                used.extend(names)
        return list(dict.fromkeys(used))

    def interface_addresses(self, host: str, devices: list[str]) -> dict[str, list[str]]:
        """{interface: its IPv4 and IPv6 addresses} on ``host`` (``ip -o addr``)."""
        found: dict[str, list[str]] = {}
        for device in devices:
            out = self.run(host, words(["ip", "-o", "addr", "show", "dev", device]))
            found[device] = _ADDRESS.findall(out.stdout) if out.returncode == 0 else []
        return found

    def check_exposure(self, host: str, devices: list[str]) -> None:
        """WARN where MASTER_ADDR (on the first host's row) or an address of the interface
        NCCL/gloo use on ``host`` is public: nothing authenticates who joins or what they
        send. Loopback, private, link-local and shared addresses pass."""
        public = []
        if host_address(host) == self.master:
            public += [f"{a} (MASTER_ADDR {name})" if a != name else f"{a} (MASTER_ADDR)"
                       for name in self.master_names() for a in resolve(name)
                       if is_public(a)]
        for device, addresses in self.interface_addresses(host, devices).items():
            public += [f"{a} ({device})" for a in addresses if is_public(a)]
        if public:
            self.add(host, "exposure", WARN, f"public address {', '.join(public)}: {EXPOSED}")
        else:
            checked = ["MASTER_ADDR"] if host_address(host) == self.master else []
            checked += devices
            self.add(host, "exposure", PASS, f"{' and '.join(checked) or 'nothing'} "
                     "private or loopback only")

    def master_names(self) -> list[str]:
        """MASTER_ADDR as the SSH fan-out sets it (the first host) and, where it differs,
        as the settings file sets it for `make node-up`."""
        names = [self.master]
        configured = self.settings.get("MASTER_ADDR", "").strip()
        if configured and configured != self.master:
            names.append(configured)
        return names

    def check_rendezvous(self) -> None:
        if self.hosts[0] not in self.reachable:  # the first host leads
            return
        port = self.master_port
        listener = subprocess.Popen(
            self.argv(self.hosts[0], words(["timeout", "30", "python3", "-c", LISTENER,
                                            str(port)])),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            ready = listener.stdout.readline().strip() == "listening"  # type: ignore[union-attr]
            for host in self.reachable:
                if not ready:
                    self.add(host, "rendezvous", FAIL, f"port {port} on {self.master} is in "
                             "use or cannot be opened: free it or set MASTER_PORT")
                    continue
                out = self.run(host, words(["timeout", "5", "bash", "-c", TCP_OPEN,
                                            "bench-doctor", self.master, str(port)]))
                result, detail = (PASS, f"{self.master}:{port} reachable") if out.returncode \
                    == 0 else (FAIL, f"{self.master}:{port} unreachable: open TCP {port} "
                               "(and the NCCL/gloo ports) between the nodes")
                self.add(host, "rendezvous", result, detail)
        finally:
            listener.kill()
            listener.wait()

    def check_shm(self, host: str) -> None:
        out = self.run(host, "df -k --output=size /dev/shm | tail -n 1")
        text = out.stdout.strip()
        size = int(text) * 1024 if text.isdigit() else 0
        result = PASS if size >= SHM_MINIMUM else FAIL
        self.add(host, "shm", result, f"/dev/shm {size / (1 << 30):.1f} GiB" +
                 ("" if result == PASS else ": enlarge it (mount -o remount,size=8G /dev/shm)"))

    def check_dataset(self, host: str) -> None:
        get = self.settings.get
        if not get("DATA_MOUNT_TYPE"):
            self.add(host, "dataset", WARN, "no DATA_MOUNT_* settings: dataset not checked")
            return
        mount = (f"type=volume,dst=/data,volume-driver=local,"
                 f"volume-opt=type={get('DATA_MOUNT_TYPE')},"
                 f"\"volume-opt=o={get('DATA_MOUNT_OPTIONS')}\","
                 f"volume-opt=device={get('DATA_DEVICE')}")
        out = self.run(host, words(["docker", "run", "--rm", "--mount", mount, "--entrypoint",
                                    "python3", self.image, "-m", "bench", "dataset", "verify",
                                    f"/data/{self.dataset}", "--sample", "16"]), timeout=300)
        text = (out.stdout + out.stderr).strip().splitlines()
        if out.returncode == 0:
            self.add(host, "dataset", PASS, text[-1] if text else "matches its manifest")
        else:
            self.add(host, "dataset", FAIL, (text[-1] if text else "mount failed")[:160])

    def check_resolve(self, host: str) -> None:
        out = self.run(host, shell(UNRESOLVED, *(host_address(h) for h in self.hosts)))
        missing = out.stdout.split()
        if missing:
            self.add(host, "resolve", FAIL, f"cannot resolve {', '.join(missing)}: add them "
                     "to /etc/hosts or DNS")
        else:
            self.add(host, "resolve", PASS, "every host name resolves")

    def check_clock(self, host: str) -> None:
        before = time.time()
        out = self.run(host, "date +%s.%N")
        after = time.time()
        try:
            skew = float(out.stdout.strip()) - (before + after) / 2
        except ValueError:
            self.add(host, "clock", FAIL, f"cannot read the clock: {out.stderr.strip()[:80]}")
            return
        if skew != skew:  # nan
            skew = float("inf")
        result = PASS if abs(skew) < 0.5 else WARN if abs(skew) < 5 else FAIL
        self.add(host, "clock", result, f"{skew:+.3f} s from this machine" +
                 ("" if result == PASS else ": run NTP (chrony or systemd-timesyncd)"))


def is_public(address: str) -> bool:
    """Whether ``address`` is globally routable (not loopback, private, link-local,
    shared or documentation space)."""
    try:
        return ipaddress.ip_address(address).is_global
    except ValueError:
        return False


def resolve(name: str) -> list[str]:
    """The addresses ``name`` resolves to on this machine (a literal is itself)."""
    try:
        ipaddress.ip_address(name)
        return [name]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _ssh_fix(stderr: str, host: str) -> str:
    """The fix for an SSH failure, chosen by what ssh said."""
    if "Host key" in stderr or "host key" in stderr:
        return f"record its key first: ssh-keyscan {host} >> ~/.ssh/known_hosts"
    if "Permission denied" in stderr:
        return f"install your key: ssh-copy-id {host}"
    if "Could not resolve" in stderr:
        return f"{host} does not resolve: add it to /etc/hosts or DNS"
    return f"start sshd on {host} and check the address and port (Connection refused/timeout)"


def main(argv: list[str] | None = None, prog: str = "bench doctor") -> int:
    parser = OneLineErrorParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", help="host1,host2[,...]: the first leads")
    parser.add_argument("--slurm", action="store_true", help="check the Slurm cluster "
                        "(controller, partition, nodes, munge, same venv or image) instead")
    parser.add_argument("--k8s", action="store_true", help="check the Kubernetes cluster "
                        "(context, permission, GPUs, results claim, image, NFS) instead")
    parser.add_argument("--profile", choices=("cpu", "gpu"), default="cpu",
                        help="--k8s: gpu checks allocatable nvidia.com/gpu (default: cpu)")
    parser.add_argument("--k8s-kind", choices=("indexed", "pytorchjob"), default="indexed",
                        help="--k8s: the object the jobs are (default: indexed)")
    parser.add_argument("--namespace", default="default", help="--k8s: the jobs' namespace")
    parser.add_argument("--kube-context", help="--k8s: kubectl's context (default: current)")
    parser.add_argument("--results-claim", help="--k8s: the results PersistentVolumeClaim "
                        "(default: bench-results)")
    parser.add_argument("--results-host-path", help="--k8s: results on each node instead")
    parser.add_argument("--pull-probe", action="store_true", help="--k8s: start a pod that "
                        "pulls the image (else only the right to create pods is checked)")
    parser.add_argument("--partition", help="--slurm: the partition (default: the cluster's)")
    parser.add_argument("--runtime", choices=("native", "compose"), default="native",
                        help="--slurm: what the jobs run: the venv on shared storage or the "
                        "image")
    parser.add_argument("--remote-dir", help="--slurm: this checkout's path on the nodes")
    parser.add_argument("--torch-flavour", default="default",
                        help="the image's TORCH_FLAVOUR, whose minimum driver the GPU hosts "
                        "need (docker/cuda-flavours.tsv)")
    parser.add_argument("--gpus-per-node", type=int, default=1,
                        help="GPUs torch must see on each GPU host (default: 1; 0: a CPU "
                        "job, the GPUs are not checked)")
    parser.add_argument("--image", default="bench-trainer:cuda", help="the trainer image")
    parser.add_argument("--env-file", type=Path, help="node settings (NCCL/GLOO interface, "
                        "dataset volume); default compose/.env, else compose/.env.example")
    parser.add_argument("--dataset", default="fashion-mnist", help="dataset directory to verify")
    parser.add_argument("--ssh-config", type=Path, help="an ssh_config file for ssh -F")
    parser.add_argument("--master-port", type=int, help="the rendezvous port to probe "
                        f"(default: MASTER_PORT of the settings, else {DEFAULT_MASTER_PORT})")
    parser.add_argument("--timeout", type=finite_float, default=300.0,
                        help="seconds any one remote check may take (default: %(default)s)")
    args = parser.parse_args(argv)
    compose_dir = Path(__file__).resolve().parents[2] / "compose"
    env_file = args.env_file or next((p for p in (compose_dir / ".env",
                                                  compose_dir / ".env.example") if p.is_file()),
                                     compose_dir / ".env")
    if args.slurm and args.k8s:
        print(f"{prog}: error: --k8s: give --slurm or --k8s, not both", file=sys.stderr)
        return 2
    if args.slurm:
        return _slurm_main(args, prog)
    if args.k8s:
        return _k8s_main(args, env_file, prog)
    try:
        if not args.hosts:
            raise ConfigError("--hosts", "''", "name the hosts (host1,host2), or check a "
                              "Slurm cluster with --slurm")
        hosts = parse_hosts(args.hosts, "--hosts")
        check_image(args.image, "--image")
        if args.torch_flavour not in flavours():
            raise ConfigError("--torch-flavour", shown(args.torch_flavour),
                              f"one of {', '.join(flavours())} (docker/cuda-flavours.tsv)")
        if not 0 <= args.gpus_per_node <= 64:
            raise ConfigError("--gpus-per-node", args.gpus_per_node, "must be 0 to 64")
        if not _DATASET.fullmatch(args.dataset) or args.dataset in (".", ".."):
            raise ConfigError("--dataset", shown(args.dataset), "one plain directory name "
                              "(letters, digits, _ . + -; not starting with . or -), e.g. "
                              "fashion-mnist")
        if not env_file.is_file():
            raise ConfigError("--env-file", shown(env_file), "no such file: copy "
                              "compose/.env.example to compose/.env and edit it")
        if args.ssh_config is not None and not args.ssh_config.is_file():
            raise ConfigError("--ssh-config", shown(args.ssh_config), "no such file")
        if not 0 < args.timeout <= MAX_CHECK_TIMEOUT_S:
            raise ConfigError("--timeout", shown(args.timeout), "must be a number of seconds "
                              f"in (0, {MAX_CHECK_TIMEOUT_S}]")
        settings = read_env_file(env_file)
        master_port = _master_port(args.master_port, settings)
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    doctor = Doctor(hosts, args.image, settings, args.ssh_config, args.dataset, master_port,
                    timeout=args.timeout, flavour=args.torch_flavour,
                    gpus_per_node=args.gpus_per_node)
    return _report(doctor.check_all(), prog)


def _slurm_main(args: argparse.Namespace, prog: str) -> int:
    from bench.host import doctor_slurm
    from bench.host.launchers.slurm import SlurmOptions

    try:
        if args.hosts:
            raise ConfigError("--hosts", shown(args.hosts), "--slurm checks the cluster's own "
                              "nodes: leave --hosts out")
        # The same checks as the launcher's: a partition name or directory no job could use
        # is refused before any command runs.
        SlurmOptions(partition=args.partition, runtime=args.runtime, remote_dir=args.remote_dir,
                     image=args.image if args.runtime == "compose" else None)
        if args.runtime == "compose":
            check_image(args.image, "--image")
        if not 0 < args.timeout <= MAX_CHECK_TIMEOUT_S:
            raise ConfigError("--timeout", shown(args.timeout), "must be a number of seconds "
                              f"in (0, {MAX_CHECK_TIMEOUT_S}]")
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    return _report(doctor_slurm.check(args.partition, args.runtime, args.image,
                                      args.remote_dir, timeout=args.timeout), prog)


def _k8s_main(args: argparse.Namespace, env_file: Path, prog: str) -> int:
    from bench.host.launchers import k8s

    try:
        if args.hosts:
            raise ConfigError("--hosts", shown(args.hosts), "--k8s checks the cluster of "
                              "kubectl's context: leave --hosts out")
        if not 0 < args.timeout <= MAX_CHECK_TIMEOUT_S:
            raise ConfigError("--timeout", shown(args.timeout), "must be a number of seconds "
                              f"in (0, {MAX_CHECK_TIMEOUT_S}]")
        # The launcher's own options section: a setting no job could use is refused here.
        options = k8s.K8sOptions(image=args.image, env_file=env_file,
                                 profile=args.profile, kind=args.k8s_kind,
                                 namespace=args.namespace, context=args.kube_context,
                                 results_claim=args.results_claim,
                                 results_host_path=args.results_host_path)
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    if shutil.which("kubectl") is None:
        print(f"{prog}: error: --k8s: kubectl not found: install it and set a context "
              "(https://kubernetes.io/docs/tasks/tools/)", file=sys.stderr)
        return 2
    return _report(k8s.cluster_checks(options, timeout=min(args.timeout, 120.0),
                                 pull_probe=args.pull_probe), prog)


def _report(rows: list[Row], prog: str) -> int:
    print(tabulate([dataclasses.astuple(r) for r in rows],
                   headers=["host", "check", "result", "detail / fix"], tablefmt="github"))
    for row in rows:
        if row.check == "exposure" and row.result == WARN:
            print(f"{prog}: warning: {row.host}: {row.detail}", file=sys.stderr)
    failed = sum(r.result == FAIL for r in rows)
    print(f"\n{failed} FAIL, {sum(r.result == WARN for r in rows)} WARN, "
          f"{sum(r.result == PASS for r in rows)} PASS", file=sys.stderr)
    return 1 if failed else 0


def _master_port(flag: int | None, settings: dict[str, str]) -> int:
    """--master-port, else MASTER_PORT of the settings, else 29500: an unprivileged port."""
    if flag is not None:
        setting, raw = "--master-port", str(flag)
    else:
        setting, raw = "MASTER_PORT", settings.get("MASTER_PORT", str(DEFAULT_MASTER_PORT))
    raw = raw.strip()
    if not (raw.isascii() and raw.isdigit()) or not MIN_PORT <= int(raw) <= MAX_PORT:
        raise ConfigError(setting, shown(raw), f"must be a TCP port in {MIN_PORT}-{MAX_PORT}")
    return int(raw)


if __name__ == "__main__":
    sys.exit(main())
