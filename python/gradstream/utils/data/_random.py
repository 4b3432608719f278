"""Where the samplers' randomness comes from.

With no generator, gradstream's global RNG (`gradstream.manual_seed` makes it reproducible).
With a generator (any object with `initial_seed()` and `manual_seed(seed)`, such as a
`torch.Generator`), a `random.Random` seeded from `generator.initial_seed()`; the generator is
then re-seeded from that source, so the next epoch draws a different order and re-seeding the
generator replays the sequence. Orders therefore differ from PyTorch's for the same seed (a
different RNG), but the same seed always gives the same order in gradstream.
"""

from __future__ import annotations

import random

import gradstream


def python_rng(generator=None) -> random.Random:
    """A `random.Random` drawn from `generator`, or from gradstream's global RNG when None."""
    if generator is None:
        return random.Random(int(gradstream.randint(0, 2**62, (1,)).item()))
    rng = random.Random(generator.initial_seed())
    generator.manual_seed(rng.getrandbits(63))
    return rng


def randperm(n: int, generator=None) -> list[int]:
    if generator is None:
        return gradstream.randperm(n).tolist()
    order = list(range(n))
    python_rng(generator).shuffle(order)
    return order


def randint(high: int, size: int, generator=None) -> list[int]:
    """`size` integers drawn uniformly from [0, high)."""
    if generator is None:
        return gradstream.randint(0, high, (size,)).tolist()
    rng = python_rng(generator)
    return [rng.randrange(high) for _ in range(size)]


def base_seed(generator=None) -> int:
    """A fresh seed for the worker processes of one DataLoader iterator (62 bits, so that
    adding a worker id keeps it a valid seed)."""
    return python_rng(generator).getrandbits(62)
