"""`gradstream.bench`: peak memory and step time of training steps, gradstream against others.

`python -m gradstream.bench` (or `gradstream-bench`) runs workloads (`mlp`, `nerf`) on systems
(`torch`, `torch-hook`, `torch-checkpoint`, `candle`, `gradstream`, `gradstream-in-backward`,
`gradstream-checkpoint`), each configuration in its own process, and writes results.json,
results.md and charts. A system that cannot run here is listed as skipped, with the reason.
"""

from .runner import Config, run

__all__ = ["Config", "run"]
