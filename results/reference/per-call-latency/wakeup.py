"""How late a thread that sleeps 0.5 ms wakes beside a busy matmul thread of its own
process (run pinned to one CPU, with and without spin.py on that CPU in another session)."""
import threading, time, torch, statistics, sys
torch.set_num_threads(1)
a = torch.randn(512, 512); out = torch.empty_like(a)
stop = threading.Event()
def busy():
    while not stop.is_set():
        torch.mm(a, a, out=out)
t0=time.perf_counter(); 
for _ in range(20): torch.mm(a,a,out=out)
print("mm ms", (time.perf_counter()-t0)/20*1e3)
th = threading.Thread(target=busy, daemon=True); th.start()
lat = []
for _ in range(200):
    s = time.perf_counter(); time.sleep(0.0005); lat.append(time.perf_counter() - s - 0.0005)
stop.set(); th.join()
print("sleep(0.5ms) overshoot beside busy thread: median %.2f ms p90 %.2f max %.2f" % (statistics.median(lat)*1e3, sorted(lat)[180]*1e3, max(lat)*1e3), "switchinterval", sys.getswitchinterval())
