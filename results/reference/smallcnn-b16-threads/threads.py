"""Per-thread CPU time of the training ranks while a cell runs: which threads take the CPU."""
import os, sys, time, subprocess, collections
HZ = os.sysconf("SC_CLK_TCK")
def ranks():
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit(): continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError: continue
        if b"LOCAL_RANK=0" in env and any(b"bench" in c for c in cmd) and b"torchrun" not in b" ".join(cmd[:3]):
            ws = next((e.split(b"=")[1].decode() for e in env if e.startswith(b"WORLD_SIZE=")), "?")
            rk = next((e.split(b"=")[1].decode() for e in env if e.startswith(b"RANK=")), "?")
            out.append((int(pid), ws, rk))
    return out
def sample(pid):
    res = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            st = open(f"/proc/{pid}/task/{tid}/stat").read()
            comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
        except OSError: continue
        f = st.rsplit(")", 1)[1].split()
        res[tid] = (comm, (int(f[11]) + int(f[12])) / HZ, f[36] if len(f) > 36 else "?")
    return res
def stat():
    out = {}
    for line in open("/proc/stat"):
        if line.startswith("cpu") and line[3].isdigit():
            f = line.split(); out[f[0]] = [int(x) for x in f[1:9]]
    return out
window = float(sys.argv[1]) if len(sys.argv) > 1 else 10
seen = set()
deadline = time.time() + float(sys.argv[2] if len(sys.argv) > 2 else 600)
while time.time() < deadline:
    rs = [r for r in ranks() if r[0] not in seen]
    if not rs:
        time.sleep(0.5); continue
    time.sleep(3)   # past start-up and warm-up
    a = {}
    for pid, _, _ in list(rs):
        try: a[pid] = sample(pid)
        except OSError: rs.remove((pid, _, _)) if False else None; seen.add(pid)
    rs = [r for r in rs if r[0] in a]
    s0 = stat()
    t0 = time.time(); time.sleep(window); dt = time.time() - t0
    s1 = stat()
    for cpu in s0:
        d = [(y - x) / HZ for x, y in zip(s0[cpu], s1[cpu])]
        print(f"  {cpu}: user {d[0]:.2f} sys {d[2]:.2f} idle {d[3]:.2f} irq {d[5]:.2f} softirq {d[6]:.2f} steal {d[7]:.2f} (s in {dt:.1f} s)", flush=True)
    for pid, ws, rk in rs:
        seen.add(pid)
        try: b = sample(pid)
        except OSError: continue
        per = collections.Counter()
        for tid, (comm, cpu, _) in b.items():
            before = a[pid].get(tid, (comm, 0.0, 0))[1]
            per[f"{comm}"] += cpu - before
        tot = sum(per.values())
        top = ", ".join(f"{k}:{v:.2f}" for k, v in per.most_common(6) if v > 0.005)
        print(f"pid {pid} world {ws} rank {rk}: {tot:.2f} CPU s in {dt:.1f} s wall ({len(b)} threads): {top}", flush=True)
