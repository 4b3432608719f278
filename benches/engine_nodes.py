"""What the engine costs per node: backward through a chain of 20k scalar adds.

    python benches/engine_nodes.py                 # 15 backward passes, ~10 s
    python benches/engine_nodes.py --repeat 41 --nodes 50000
    python benches/engine_nodes.py --busy-thread   # another Python thread holds the GIL

Each add's own backward is a pass-through, so the time is the engine's: scheduling,
pending gradients, the Ctrl-C check. Timed with `timeit` in CPU seconds of the process
(`time.process_time`: time spent waiting for a core on a shared machine is not counted),
single-threaded; the graph is rebuilt before each pass, outside the timing.

With `--busy-thread` a Python thread spins while backward runs, and the time is wall
time: an engine that takes the GIL between nodes waits for that thread each time.
"""

import argparse
import os
import statistics
import threading
import time
import timeit

os.environ.setdefault("RAYON_NUM_THREADS", "1")

import gradstream as gs  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--busy-thread", action="store_true")
    a = p.parse_args()
    state = {}
    stop = threading.Event()

    def spin():
        n = 0
        while not stop.is_set():
            n += 1

    if a.busy_thread:
        threading.Thread(target=spin, daemon=True).start()

    def build():
        x = gs.tensor(1.0, requires_grad=True)
        y = x
        for _ in range(a.nodes):
            y = y + 1.0
        state["loss"] = y

    times = timeit.repeat(
        "state['loss'].backward()",
        setup=build,
        timer=time.perf_counter if a.busy_thread else time.process_time,
        number=1,
        repeat=a.repeat,
        globals={"state": state},
    )
    stop.set()
    med = statistics.median(times)
    clock = "wall, busy Python thread" if a.busy_thread else "CPU"
    print(
        f"backward of {a.nodes} scalar adds ({clock}): median {med * 1e3:.1f} ms "
        f"({med / a.nodes * 1e9:.0f} ns per node), min {min(times) * 1e3:.1f} ms, "
        f"{a.repeat} passes"
    )


if __name__ == "__main__":
    main()
