"""Build the device reference table bench accept judges devices against.

  python scripts/device_reference.py results/reference/gpu-h200/call1/accept/accept-figures.jsonl \
      > results/reference/devices.json

Each FILE is an accept figures file (``bench accept`` writes OUT/accept-figures.jsonl); its
ok accept records give, per device model and check, the median of the devices' mean figures
(``bench.analysis.acceptance.reference_table``). Lines that are not such records are skipped
with a warning naming the file and line.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import record  # noqa: E402
from bench.analysis import acceptance  # noqa: E402
from bench.paths import path_arg  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=path_arg, metavar="FILE")
    args = parser.parse_args(argv)
    records, sources = [], []
    for path in args.files:
        try:
            loaded = record.load(path, "FILE")
        except record.ResultsError as error:
            parser.exit(2, f"{parser.prog}: error: {error}\n")
        for rec in loaded:
            if rec.get("mode") == "accept" and rec.get("status") == "ok":
                records.append(rec)
                sources.append(path.as_posix())
    if not records:
        parser.exit(2, f"{parser.prog}: error: FILE: no ok accept record in "
                       f"{', '.join(map(str, args.files))}; give bench accept's "
                       "OUT/accept-figures.jsonl\n")
    print(json.dumps(acceptance.reference_table(records, sources), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
