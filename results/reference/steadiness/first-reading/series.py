import time, torch, sys, json
torch.set_num_threads(1)
a = torch.randn(256, 256); b = torch.randn(256, 256)
def window(sec):
    n = 0; t0 = time.perf_counter()
    while time.perf_counter() - t0 < sec:
        for _ in range(20): torch.mm(a, b)
        n += 20
    return n / (time.perf_counter() - t0)
window(1)
print(json.dumps([window(1.0) for _ in range(int(sys.argv[1]))]))
