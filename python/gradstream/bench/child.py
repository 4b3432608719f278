"""One benchmark configuration in its own process: `python -m gradstream.bench.child SPEC_JSON`.

Prints one JSON object on its last line of stdout: the figures, or a skip/error with a reason.

On a GPU (`"device": "cuda"` in the spec) the step is timed between synchronisations, the
peak is the library's own counter of its tensors' bytes on the device (reset after the warm-up
step, above its level before the workload was loaded), and the phases are printed for the
harness's driver-memory sampler (`gpu.py`). A spec with `"cap"` (`--max-batch`) first limits
the memory the process can use on the device.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback

from . import gpu, measure, tensorfile, workloads
from .systems import Unsupported


def run(spec: dict) -> dict:
    impl = importlib.import_module(f"gradstream.bench.systems.{spec['impl']}")
    workload = workloads.WORKLOADS[spec["workload"]](**spec["sizes"])
    threads = spec["threads"]
    device = spec.get("device", "cpu")
    impl.setup(threads, device)
    on_host = device == "cpu"
    if not on_host:
        counter = impl.Counter(device)
        cap = spec.get("cap")
        if cap:
            apply_cap(impl, device, cap)
        gpu.mark("baseline")
        device_baseline = counter.allocated()
    baseline = measure.status_bytes("VmRSS")
    tensors = tensorfile.load(spec["data"])
    run_state = impl.build(workload, tensors, spec["variant"], device)
    del tensors
    if on_host:
        result = measure.measure(
            run_state.step, spec["steps"], baseline, after_warmup=run_state.after_warmup
        )
    else:

        def after_warmup():
            run_state.after_warmup()
            counter.reset_peak()

        result = measure.measure(
            run_state.step,
            spec["steps"],
            baseline,
            after_warmup=after_warmup,
            sync=lambda: impl.synchronize(device),
            mark=gpu.mark,
        )
        # The library's counter is the peak; the host's RSS figures stay, renamed.
        result["host_peak_bytes"] = result.pop("peak_bytes")
        result["host_steady_bytes"] = result.pop("steady_bytes")
        result["peak_bytes"] = counter.peak() - device_baseline
        result["device_baseline_bytes"] = device_baseline
        result.update(counter.extra())
        result["device"] = device
    result.update(run_state.extra())
    result["threads"] = threads
    result["num_params"] = workload.num_params()
    return result


def apply_cap(impl, device: str, cap: dict) -> None:
    """`--max-batch`: leave the process `cap["bytes"]` of the device: a ballast that takes
    the rest of the free memory (`"rule": "ballast"`), or the library's own
    `set_per_process_memory_fraction` (`"fraction"`)."""
    if cap["rule"] == "ballast":
        gpu.leave_free(cap["bytes"])
    elif cap["rule"] == "fraction":
        impl.cap_fraction(device, cap["bytes"])
    else:
        raise ValueError(f"unknown cap rule {cap['rule']!r}")


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
