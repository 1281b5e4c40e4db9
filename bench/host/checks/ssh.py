"""The host itself: it answers over ssh (passwordless, its key known), it resolves every
host name of the job, and its clock agrees with this machine's."""
from __future__ import annotations

import subprocess
import time

from bench.host.checks import FAIL, PASS, WARN, Row
from bench.host.checks.remote import Hosts, Remote, shell
from bench.topology import host_address

SSH_PROBE_S = 30          # the first contact: a host that does not answer in 30 s is down
UNRESOLVED = 'for name; do getent ahosts "$name" >/dev/null || echo "$name"; done'


def ssh_row(host: str, out: subprocess.CompletedProcess) -> Row:
    """The ``ssh`` row from any command's result on ``host``: it ran (PASS), ssh gave up
    (FAIL, with the fix for what ssh said), or nothing answered in time."""
    if out.returncode == 124 and not out.stdout and out.stderr.startswith("no answer"):
        return Row(host, "ssh", FAIL, f"{out.stderr}: is the host up and sshd running?")
    if out.returncode == 0:
        return Row(host, "ssh", PASS, "passwordless, host key known")
    reason = (out.stderr.strip().splitlines() or ["exit " + str(out.returncode)])[-1]
    return Row(host, "ssh", FAIL, f"{reason}; {ssh_fix(out.stderr, host)}")


def reach(remote: Remote, host: str) -> Row:
    """Whether ``host`` runs a command over ssh, without a password or a question."""
    return ssh_row(host, remote.run(host, "true", timeout=SSH_PROBE_S))


def ssh_fix(stderr: str, host: str) -> str:
    """The fix for an SSH failure, chosen by what ssh said."""
    if "Host key" in stderr or "host key" in stderr:
        return f"record its key first: ssh-keyscan {host} >> ~/.ssh/known_hosts"
    if "Permission denied" in stderr:
        return f"install your key: ssh-copy-id {host}"
    if "Could not resolve" in stderr:
        return f"{host} does not resolve: add it to /etc/hosts or DNS"
    return f"start sshd on {host} and check the address and port (Connection refused/timeout)"


def resolve_row(job: Hosts, host: str) -> Row:
    """Every host name of the job resolves on ``host``."""
    out = job.run(host, shell(UNRESOLVED, *(host_address(h) for h in job.names)))
    missing = out.stdout.split()
    if missing:
        return Row(host, "resolve", FAIL, f"cannot resolve {', '.join(missing)}: add them "
                   "to /etc/hosts or DNS")
    return Row(host, "resolve", PASS, "every host name resolves")


def clock_row(remote: Remote, host: str) -> Row:
    """``host``'s clock against this machine's: PASS within 0.5 s, WARN to 5 s, FAIL beyond."""
    before = time.time()
    out = remote.run(host, "date +%s.%N")
    after = time.time()
    try:
        skew = float(out.stdout.strip()) - (before + after) / 2
    except ValueError:
        return Row(host, "clock", FAIL, f"cannot read the clock: {out.stderr.strip()[:80]}")
    if skew != skew:  # nan
        skew = float("inf")
    result = PASS if abs(skew) < 0.5 else WARN if abs(skew) < 5 else FAIL
    return Row(host, "clock", result, f"{skew:+.3f} s from this machine" +
               ("" if result == PASS else ": run NTP (chrony or systemd-timesyncd)"))
