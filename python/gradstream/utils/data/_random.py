"""Where the samplers' randomness comes from.

With no generator, gradstream's global RNG (`gradstream.manual_seed` makes it reproducible);
with a `gradstream.Generator`, that generator's draws, as PyTorch's samplers use theirs. Any
other generator object with `initial_seed()` and `manual_seed(seed)` (a `torch.Generator`)
seeds a `random.Random`, and is then re-seeded from it, so the next epoch draws a different
order and re-seeding the generator replays the sequence. Orders differ from PyTorch's for
the same seed (a different RNG), but the same seed always gives the same order here.

A sampler that draws as it is iterated (`RandomSampler`) takes one `pass_source` per pass:
without a generator that is a private generator seeded once from the global RNG when the
pass starts, as in PyTorch, so the order does not depend on what else draws from the global
RNG while the pass runs (dropout between batches), nor moves it as it goes.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import gradstream

# Indices drawn with replacement are drawn this many at a time, as they are consumed (as
# PyTorch's RandomSampler does): `num_samples` may be far more than fits in memory.
CHUNK = 32


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


def pass_source(generator=None) -> gradstream.Generator | random.Random:
    """What one pass of a sampler draws from (see the module docstring)."""
    if generator is None:
        seed = gradstream.randint(0, 2**62, (1,)).item()
        return gradstream.Generator().manual_seed(int(seed))
    if isinstance(generator, gradstream.Generator):
        return generator
    return python_rng(generator)


def randperm(n: int, generator=None) -> list[int]:
    """A permutation of range(n); `generator` may also be a `pass_source`."""
    if isinstance(generator, random.Random):
        order = list(range(n))
        generator.shuffle(order)
        return order
    if _native(generator):
        return gradstream.randperm(n, generator=generator).tolist()
    return randperm(n, python_rng(generator))


def chunks(size: int) -> Iterator[int]:
    """How many of `size` draws to make at a time: `CHUNK`, `CHUNK`, ..., then the rest."""
    full, rest = divmod(size, CHUNK)
    return itertools.chain(itertools.repeat(CHUNK, full), [rest] if rest else [])


def randint_stream(high: int, size: int, source) -> Iterator[int]:
    """`size` integers drawn uniformly from [0, high) from a `pass_source`, `CHUNK` at a
    time as they are consumed."""
    for count in chunks(size):
        if isinstance(source, random.Random):
            yield from [source.randrange(high) for _ in range(count)]
        else:
            yield from gradstream.randint(0, high, (count,), generator=source).tolist()


def base_seed(generator=None) -> int:
    """A fresh seed for the worker processes of one DataLoader iterator (62 bits, so that
    adding a worker id keeps it a valid seed)."""
    return python_rng(generator).getrandbits(62)
