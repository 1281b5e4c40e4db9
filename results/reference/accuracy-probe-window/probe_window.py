"""Experiment driver (issue 29): prediction_accuracy.measure, with the one-node timeline's
probe observing as many steps as the cells time (--comm-probe-steps = the chosen steps)."""
import importlib.util, sys
from pathlib import Path
REPO = Path(sys.argv[1]).resolve()
spec = importlib.util.spec_from_file_location("pa", REPO / "scripts" / "prediction_accuracy.py")
pa = importlib.util.module_from_spec(spec); spec.loader.exec_module(pa)
plain_run = pa._run
def run(argv):
    if "--workload" not in argv and "--steps" in argv:
        argv = [*argv, "--comm-probe-steps", argv[argv.index("--steps") + 1]]
    plain_run(argv)
pa._run = run
sys.argv = ["prediction_accuracy.py", *sys.argv[2:]]
sys.exit(pa.main())
