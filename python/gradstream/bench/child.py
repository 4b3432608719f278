"""One benchmark configuration in its own process: `python -m gradstream.bench.child SPEC_JSON`.

Prints one JSON object on its last line of stdout: the figures, or a skip/error with a reason.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback

from . import measure, tensorfile, workloads
from .systems import Unsupported


def run(spec: dict) -> dict:
    impl = importlib.import_module(f"gradstream.bench.systems.{spec['impl']}")
    workload = workloads.WORKLOADS[spec["workload"]](**spec["sizes"])
    threads = spec["threads"]
    impl.setup(threads)
    baseline = measure.status_bytes("VmRSS")
    tensors = tensorfile.load(spec["data"])
    run_state = impl.build(workload, tensors, spec["variant"])
    del tensors
    result = measure.measure(
        run_state.step, spec["steps"], baseline, after_warmup=run_state.after_warmup
    )
    result.update(run_state.extra())
    result["threads"] = threads
    result["num_params"] = workload.num_params()
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(argv[0])
    try:
        result = run(spec)
    except Unsupported as e:
        result = {"status": "skipped", "reason": str(e)}
    except Exception as e:  # reported as a row of the table, not a crash of the harness
        traceback.print_exc()
        result = {"status": "error", "reason": f"{type(e).__name__}: {e}"}
    sys.stdout.write("\n" + json.dumps(result) + "\n")
    sys.stdout.flush()
    # Skip interpreter teardown (freeing everything can take long and proves nothing).
    os._exit(0 if result["status"] != "error" else 1)


if __name__ == "__main__":
    main()
