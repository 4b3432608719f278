"""Where the samplers' randomness comes from.

With no generator, gradstream's global RNG (`gradstream.manual_seed` makes it reproducible);
with a `gradstream.Generator`, that generator's draws, as PyTorch's samplers use theirs. Any
other generator object with `initial_seed()` and `manual_seed(seed)` (a `torch.Generator`)
seeds a `random.Random`, and is then re-seeded from it, so the next epoch draws a different
order and re-seeding the generator replays the sequence. Orders differ from PyTorch's for
the same seed (a different RNG), but the same seed always gives the same order here.
"""

from __future__ import annotations

import random

import gradstream


def _native(generator) -> bool:
    return generator is None or isinstance(generator, gradstream.Generator)


def python_rng(generator=None) -> random.Random:
    """A `random.Random` drawn from `generator`, or from gradstream's global RNG when None."""
    if _native(generator):
        seed = gradstream.randint(0, 2**62, (1,), generator=generator).item()
        return random.Random(int(seed))
    rng = random.Random(generator.initial_seed())
    generator.manual_seed(rng.getrandbits(63))
    return rng


def randperm(n: int, generator=None) -> list[int]:
    if _native(generator):
        return gradstream.randperm(n, generator=generator).tolist()
    order = list(range(n))
    python_rng(generator).shuffle(order)
    return order


def randint(high: int, size: int, generator=None) -> list[int]:
    """`size` integers drawn uniformly from [0, high)."""
    if _native(generator):
        return gradstream.randint(0, high, (size,), generator=generator).tolist()
    rng = python_rng(generator)
    return [rng.randrange(high) for _ in range(size)]


def base_seed(generator=None) -> int:
    """A fresh seed for the worker processes of one DataLoader iterator (62 bits, so that
    adding a worker id keeps it a valid seed)."""
    return python_rng(generator).getrandbits(62)
