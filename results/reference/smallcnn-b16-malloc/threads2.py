"""Per-thread user/sys CPU, minor faults and context switches of the training ranks while a
cell runs, plus per-CPU /proc/stat; optionally perf record over the same window."""
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
            status = open(f"/proc/{pid}/task/{tid}/status").read()
        except OSError: continue
        f = st.rsplit(")", 1)[1].split()
        cs = {l.split(":")[0]: int(l.split()[1]) for l in status.splitlines() if "ctxt_switches" in l}
        # fields after ')': state=0 ... minflt=7 majflt=9 utime=11 stime=12 processor=36
        res[tid] = (comm, int(f[11]) / HZ, int(f[12]) / HZ, int(f[7]), cs.get("voluntary_ctxt_switches", 0), cs.get("nonvoluntary_ctxt_switches", 0), f[36])
    return res
def stat():
    out = {}
    for line in open("/proc/stat"):
        if line.startswith("cpu") and line[3].isdigit():
            f = line.split(); out[f[0]] = [int(x) for x in f[1:9]]
    return out
window = float(sys.argv[1]); deadline = time.time() + float(sys.argv[2]); tag = sys.argv[3]
seen = set()
while time.time() < deadline:
    rs = [r for r in ranks() if r[0] not in seen]
    if not rs:
        time.sleep(0.5); continue
    time.sleep(4)
    a = {}
    for r in rs:
        try: a[r[0]] = sample(r[0])
        except OSError: seen.add(r[0])
    rs = [r for r in rs if r[0] in a]
    for r in rs: seen.add(r[0])
    s0 = stat(); t0 = time.time()
    perf = subprocess.Popen(["perf", "record", "-a", "-F", "499", "-g", "-o", f"/tmp/exp2/perf-{tag}-{len(seen)}.data", "--", "sleep", str(window)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if os.environ.get("PERF") else None
    time.sleep(window)
    if perf: perf.wait()
    dt = time.time() - t0; s1 = stat()
    print(f"== {tag} sample {len(seen)}", flush=True)
    for cpu in s0:
        d = [(y - x) / HZ for x, y in zip(s0[cpu], s1[cpu])]
        print(f"  {cpu}: user {d[0]:.2f} sys {d[2]:.2f} idle {d[3]:.2f} softirq {d[6]:.2f} steal {d[7]:.2f} (s in {dt:.1f} s)", flush=True)
    for pid, ws, rk in rs:
        try: b = sample(pid)
        except OSError: continue
        per = collections.defaultdict(lambda: [0.0, 0.0, 0, 0, 0])
        for tid, (comm, ut, st, mf, vcs, ivcs, cpu) in b.items():
            o = a[pid].get(tid, (comm, 0.0, 0.0, 0, 0, 0, 0))
            p = per[comm]; p[0] += ut - o[1]; p[1] += st - o[2]; p[2] += mf - o[3]; p[3] += vcs - o[4]; p[4] += ivcs - o[5]
        print(f"pid {pid} world {ws} rank {rk}:", flush=True)
        for comm, (ut, st, mf, vcs, ivcs) in sorted(per.items(), key=lambda kv: -(kv[1][0] + kv[1][1])):
            if ut + st > 0.005 or mf:
                print(f"    {comm}: user {ut:.2f} sys {st:.2f} minflt {mf} vcs {vcs} ivcs {ivcs}", flush=True)
