"""Figures of finished filter benchmarks, from their per-question files:

    python -m bench.filter_plots filter_popqa_dev filter_pubhealth_dev

writes bench/results/plots/<name>/*.png.
"""

from __future__ import annotations

import json
import sys

from bench.common import RESULTS
from chunkrag_eval.plots import write_plots
from chunkrag_eval.report import load_report


def main(names: list[str]) -> int:
    for name in names:
        source = RESULTS / f"{name}.questions.json"
        report = load_report(source)
        # The titles name the filter from the options the run recorded.
        options = json.loads(source.read_text(encoding="utf-8"))["summary"].get("options")
        for path in write_plots(report, RESULTS / "plots" / name, name, options):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
