"""``python -m bench doctor --hosts h1,h2``: is this cluster ready for a multi-node job?

One row per host and check, PASS, WARN or FAIL with the fix; exit status 1 on any FAIL.
The first host leads (MASTER_ADDR), as in the SSH fan-out. Checks, per host:

  ssh        passwordless, non-interactive SSH with a known host key
  docker     the Docker engine answers and Compose is installed
  image      the trainer image is there; its id and torch/CUDA/NCCL versions agree across hosts
  gpu        the GPUs are visible inside the image (WARN on a host without NVIDIA driver)
  interface  the interface routing to MASTER_ADDR exists and matches NCCL/GLOO_SOCKET_IFNAME
  rendezvous MASTER_PORT on the first host is reachable from this host
  shm        /dev/shm is at least 1 GiB (the trainer containers share the host's: ipc host)
  dataset    the dataset volume mounts in the image and matches its manifest
  resolve    every host name resolves on this host
  clock      the clock is within 0.5 s of this machine's (WARN to 5 s, FAIL beyond)
"""
from __future__ import annotations

import argparse
import dataclasses
import shlex
import subprocess
import sys
import time
from pathlib import Path

from tabulate import tabulate

from bench.config import OneLineErrorParser
from bench.launchers.ssh import ssh_base
from bench.options import ConfigError
from bench.settings import read_env_file
from bench.topology import parse_hosts

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
SHM_MINIMUM = 1 << 30
VERSIONS = ("import torch; nccl = torch.cuda.nccl.version() if "
            "torch.cuda.is_available() else None; print(torch.__version__, torch.version.cuda, "
            "nccl)")


@dataclasses.dataclass(slots=True)
class Row:
    host: str
    check: str
    result: str
    detail: str


class Doctor:
    def __init__(self, hosts: list[str], image: str, settings: dict[str, str],
                 ssh_config: Path | None, dataset: str, master_port: int):
        self.hosts, self.image, self.settings = hosts, image, settings
        self.ssh = ssh_base(ssh_config)
        self.dataset, self.master_port = dataset, master_port
        self.master = hosts[0]
        self.rows: list[Row] = []
        self.reachable: list[str] = []

    def run(self, host: str, command: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([*self.ssh, host, command], capture_output=True, text=True,
                              timeout=timeout)

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
                self.check_gpu(host)
                self.check_dataset(host)
            self.check_interface(host)
            self.check_shm(host)
            self.check_resolve(host)
            self.check_clock(host)
        self.check_same_image(images)
        self.check_rendezvous()
        return self.rows

    def check_ssh(self, host: str) -> bool:
        try:
            out = self.run(host, "true", timeout=30)
        except subprocess.TimeoutExpired:
            self.add(host, "ssh", FAIL, "no answer in 30 s: is the host up and sshd running?")
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
        image = shlex.quote(self.image)
        ident = self.run(host, f"docker image inspect -f '{{{{.Id}}}}' {image}")
        if ident.returncode != 0:
            self.add(host, "image", FAIL, f"image {self.image} missing on {host}: run make "
                     "build there, or docker save it here and docker load it there")
            return None
        versions = self.run(host, f"docker run --rm --entrypoint python3 {image} -c "
                            f"{shlex.quote(VERSIONS)}", timeout=300)
        found = versions.stdout.strip() if versions.returncode == 0 else "unreadable"
        self.add(host, "image", PASS, f"{ident.stdout.strip()[:19]}, torch/CUDA/NCCL {found}")
        return ident.stdout.strip(), found

    def check_same_image(self, images: dict[str, tuple[str, str] | None]) -> None:
        present = {host: found for host, found in images.items() if found}
        if len(set(present.values())) > 1:
            for host, (image_id, versions) in present.items():
                self.add(host, "image", FAIL, f"differs across hosts: {image_id[:19]} "
                         f"({versions}); build or load the same image everywhere")

    def check_gpu(self, host: str) -> None:
        if self.run(host, "command -v nvidia-smi >/dev/null && nvidia-smi -L").returncode:
            self.add(host, "gpu", WARN, "no NVIDIA driver: a CPU host (gloo only)")
            return
        out = self.run(host, f"docker run --rm --gpus all --entrypoint nvidia-smi "
                       f"{shlex.quote(self.image)} -L", timeout=300)
        if out.returncode == 0 and "GPU" in out.stdout:
            self.add(host, "gpu", PASS, f"{out.stdout.count('GPU ')} GPU(s) visible in the image")
        else:
            self.add(host, "gpu", FAIL, "GPUs not visible in the container: install "
                     "nvidia-container-toolkit (scripts/install-host.sh gpu), restart Docker")

    def check_interface(self, host: str) -> None:
        route = self.run(host, f"ip route get $(getent ahostsv4 {shlex.quote(self.master)} "
                         "| awk 'NR==1{print $1}') | grep -o 'dev [^ ]*' | head -n 1")
        device = route.stdout.strip().removeprefix("dev ").strip()
        if not device:
            self.add(host, "interface", FAIL, f"no route to MASTER_ADDR {self.master}")
            return
        for variable in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            wanted = self.settings.get(variable, "")
            if not wanted:
                self.add(host, "interface", WARN, f"{variable} unset: the library guesses; "
                         f"set {variable}={device} (the route to {self.master})")
                continue
            names = [n.lstrip("=") for n in wanted.split(",") if not n.startswith("^")]
            exists = self.run(host, " || ".join(f"ip link show {shlex.quote(n)} >/dev/null "
                                                "2>&1" for n in names) or "false")
            if exists.returncode != 0:
                self.add(host, "interface", FAIL, f"{variable}={wanted}: no such interface "
                         f"on {host}; the route to {self.master} uses {device}")
            elif device not in names:
                self.add(host, "interface", FAIL, f"{variable}={wanted} but the route to "
                         f"{self.master} uses {device}: set {variable}={device}")
            else:
                self.add(host, "interface", PASS, f"{variable}={wanted} routes to {self.master}")

    def check_rendezvous(self) -> None:
        if self.master not in self.reachable:
            return
        port = self.master_port
        listener = subprocess.Popen(
            [*self.ssh, self.master, "timeout 30 python3 -c " + shlex.quote(
                "import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
                f"socket.SO_REUSEADDR, 1); s.bind(('', {port})); s.listen(16); "
                "print('listening', flush=True)\nwhile True: s.accept()[0].close()")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            ready = listener.stdout.readline().strip() == "listening"  # type: ignore[union-attr]
            for host in self.reachable:
                if not ready:
                    self.add(host, "rendezvous", FAIL, f"port {port} on {self.master} is in "
                             "use or cannot be opened: free it or set MASTER_PORT")
                    continue
                out = self.run(host, f"timeout 5 bash -c '</dev/tcp/{self.master}/{port}'")
                result, detail = (PASS, f"{self.master}:{port} reachable") if out.returncode \
                    == 0 else (FAIL, f"{self.master}:{port} unreachable: open TCP {port} "
                               "(and the NCCL/gloo ports) between the nodes")
                self.add(host, "rendezvous", result, detail)
        finally:
            listener.kill()
            listener.wait()

    def check_shm(self, host: str) -> None:
        out = self.run(host, "df -k --output=size /dev/shm | tail -n 1")
        size = int(out.stdout.strip() or 0) * 1024
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
        out = self.run(host, f"docker run --rm --mount {shlex.quote(mount)} --entrypoint "
                       f"python3 {shlex.quote(self.image)} -m bench dataset verify "
                       f"/data/{shlex.quote(self.dataset)} --sample 16", timeout=300)
        text = (out.stdout + out.stderr).strip().splitlines()
        if out.returncode == 0:
            self.add(host, "dataset", PASS, text[-1] if text else "matches its manifest")
        else:
            self.add(host, "dataset", FAIL, (text[-1] if text else "mount failed")[:160])

    def check_resolve(self, host: str) -> None:
        names = " ".join(shlex.quote(h) for h in self.hosts)
        out = self.run(host, f"for h in {names}; do getent ahosts $h >/dev/null || echo $h; "
                       "done")
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
        skew = float(out.stdout.strip() or 0) - (before + after) / 2
        result = PASS if abs(skew) < 0.5 else WARN if abs(skew) < 5 else FAIL
        self.add(host, "clock", result, f"{skew:+.3f} s from this machine" +
                 ("" if result == PASS else ": run NTP (chrony or systemd-timesyncd)"))


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
    parser.add_argument("--hosts", required=True, help="host1,host2[,...]: the first leads")
    parser.add_argument("--image", default="bench-trainer:cuda", help="the trainer image")
    parser.add_argument("--env-file", type=Path, help="node settings (NCCL/GLOO interface, "
                        "dataset volume); default compose/.env, else compose/.env.example")
    parser.add_argument("--dataset", default="fashion-mnist", help="dataset directory to verify")
    parser.add_argument("--ssh-config", type=Path, help="an ssh_config file for ssh -F")
    args = parser.parse_args(argv)
    compose_dir = Path(__file__).resolve().parent.parent / "compose"
    env_file = args.env_file or next(p for p in (compose_dir / ".env",
                                                 compose_dir / ".env.example") if p.is_file())
    try:
        hosts = parse_hosts(args.hosts, "--hosts")
        if not env_file.is_file():
            raise ConfigError("--env-file", env_file, "no such file")
    except ConfigError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    settings = read_env_file(env_file)
    doctor = Doctor(hosts, args.image, settings, args.ssh_config, args.dataset,
                    int(settings.get("MASTER_PORT", 29500)))
    rows = doctor.check_all()
    print(tabulate([dataclasses.astuple(r) for r in rows],
                   headers=["host", "check", "result", "detail / fix"], tablefmt="github"))
    failed = sum(r.result == FAIL for r in rows)
    print(f"\n{failed} FAIL, {sum(r.result == WARN for r in rows)} WARN, "
          f"{sum(r.result == PASS for r in rows)} PASS", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
