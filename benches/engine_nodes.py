"""What the engine costs per node: backward through a chain of 20k scalar adds.

    python benches/engine_nodes.py                 # 15 backward passes, ~10 s
    python benches/engine_nodes.py --repeat 41 --nodes 50000

Each add's own backward is a pass-through, so the time is the engine's: scheduling,
pending gradients, the Ctrl-C check. Timed with `timeit` in CPU seconds of the process
(`time.process_time`: time spent waiting for a core on a shared machine is not counted),
single-threaded; the graph is rebuilt before each pass, outside the timing.
"""

import argparse
import os
import statistics
import timeit

os.environ.setdefault("RAYON_NUM_THREADS", "1")

import gradstream as gs  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=15)
    a = p.parse_args()
    state = {}

    def build():
        x = gs.tensor(1.0, requires_grad=True)
        y = x
        for _ in range(a.nodes):
            y = y + 1.0
        state["loss"] = y

    times = timeit.repeat(
        "state['loss'].backward()",
        setup=build,
        timer=__import__("time").process_time,
        number=1,
        repeat=a.repeat,
        globals={"state": state},
    )
    med = statistics.median(times)
    print(
        f"backward of {a.nodes} scalar adds: median {med * 1e3:.1f} ms "
        f"({med / a.nodes * 1e9:.0f} ns per node), min {min(times) * 1e3:.1f} ms, "
        f"{a.repeat} passes"
    )


if __name__ == "__main__":
    main()
