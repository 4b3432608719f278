"""`python -m gradstream.bench --plot RESULTS.json [--out DIR]`: a finished run's charts again.

Reads the results file a run wrote (results.json of the main table, budget_sweep.json of
`--budget-sweep`, max_batch.json of `--max-batch`) and draws the charts that run draws, from
its figures alone: nothing is run again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import budget_sweep, max_batch, report


def kind(result: dict) -> str:
    """Which run wrote `result`: "sweep", "max_batch" or "table"."""
    if not isinstance(result, dict):
        pass
    elif "findings" in result:
        return "sweep"
    elif "cap_bytes" in result.get("meta", {}):
        return "max_batch"
    elif "lower_bounds" in result and "records" in result:
        return "table"
    raise ValueError(
        "not a gradstream.bench results file: expected results.json, budget_sweep.json or "
        "max_batch.json (no 'records' with 'lower_bounds', 'findings' or 'meta.cap_bytes')"
    )


def redraw(result: dict, out: Path) -> tuple[list[str], list[str]]:
    """Draw `result`'s charts into `out`: the files written and the notes on what was not."""
    out.mkdir(parents=True, exist_ok=True)
    what = kind(result)
    if what == "sweep":
        if budget_sweep.plot(result, out / "budget_sweep.png"):
            return ["budget_sweep.png"], []
        return [], [report.NO_MATPLOTLIB]
    if what == "max_batch":
        notes = max_batch.chart(result, out)
        return ([] if notes else ["max_batch.png"]), notes
    return report.draw_charts(result, out)


def main(path: Path, out: Path) -> int:
    try:
        result = json.loads(path.read_text())
        files, notes = redraw(result, out)
    except (OSError, ValueError) as e:
        print(f"gradstream.bench --plot {path}: {e}", file=sys.stderr)
        return 2
    except KeyError as e:
        print(f"gradstream.bench --plot {path}: a record lacks {e}", file=sys.stderr)
        return 2
    for note in notes:
        print(note, file=sys.stderr)
    if not files:
        return 1
    print(f"wrote {', '.join(files)} to {out}")
    return 0
