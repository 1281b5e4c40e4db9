import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
mode = sys.argv[2]  # "work" : count iterations per 0.25s window, print; "burn": spin forever
if mode == "burn":
    while True:
        x = 0
        for i in range(100000): x += i
else:
    end = time.time() + float(sys.argv[3])
    while time.time() < end:
        t0 = time.perf_counter(); n = 0
        while time.perf_counter() - t0 < 0.25:
            x = 0
            for i in range(10000): x += i
            n += 1
        print(f"{time.time():.3f} {n}", flush=True)
