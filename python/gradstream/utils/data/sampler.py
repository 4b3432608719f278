"""Samplers: the order in which a map-style dataset's indices (or batches of them) are drawn."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from ._random import chunks, pass_source, python_rng, randint_stream, randperm

__all__ = [
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
    "BatchSampler",
]


class Sampler:
    """Iterates over indices of a dataset (or over lists of them, for a batch sampler)."""

    def __init__(self, data_source=None) -> None:
        pass

    def __iter__(self) -> Iterator:
        raise NotImplementedError


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation of the indices each epoch, or `num_samples` indices drawn with
    `replacement`.

    Indices are drawn as they are consumed: with replacement a few dozen at a time, so
    `num_samples` may be far larger than memory (minGPT asks for 10**10); without, one
    permutation of the dataset at a time.

    Without a generator each epoch draws from a generator seeded once from gradstream's global
    RNG (`gradstream.manual_seed`) when the epoch starts; with a `gradstream.Generator`, from
    that generator; with another generator (a `torch.Generator`), from a Python RNG seeded by
    `generator.initial_seed()`, and the generator is re-seeded so that the next epoch differs.
    For the same seed the order differs from PyTorch's (a different RNG), but the same seed
    always gives the same order here.
    """

    def __init__(
        self, data_source, replacement: bool = False, num_samples: int | None = None, generator=None
    ) -> None:
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise TypeError(
                f"replacement should be a boolean value, but got replacement={self.replacement}"
            )
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(
                f"num_samples should be a positive integer value, but got "
                f"num_samples={self.num_samples}"
            )

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        source = pass_source(self.generator)
        if self.replacement:
            yield from randint_stream(n, self.num_samples, source)
            return
        # More samples than indices: whole permutations, then the head of one more.
        for _ in range(self.num_samples // n):
            yield from randperm(n, source)
        yield from randperm(n, source)[: self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order, without replacement."""

    def __init__(self, indices: Sequence[int], generator=None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        for i in randperm(len(self.indices), self.generator):
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """`num_samples` indices in [0, len(weights)), index i drawn with probability proportional
    to `weights[i]`, with or without replacement (see `RandomSampler` for the RNG). With
    replacement they are drawn as they are consumed, so `num_samples` may exceed memory."""

    def __init__(
        self, weights: Sequence[float], num_samples: int, replacement: bool = True, generator=None
    ) -> None:
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples <= 0:
            raise ValueError(
                f"num_samples should be a positive integer value, but got num_samples={num_samples}"
            )
        if not isinstance(replacement, bool):
            raise ValueError(
                f"replacement should be a boolean value, but got replacement={replacement}"
            )
        w = np.asarray(weights.tolist() if hasattr(weights, "tolist") else weights, np.float64)
        if w.ndim != 1:
            raise ValueError(
                f"weights should be a 1d sequence but given weights have shape {tuple(w.shape)}"
            )
        self.weights = w
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        w = self.weights
        if not np.isfinite(w).all():
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        if (w < 0).any():
            raise RuntimeError(
                "invalid multinomial distribution (encountering probability entry < 0)"
            )
        if w.sum() == 0:
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        if not self.replacement and self.num_samples > len(w):
            raise RuntimeError(
                "cannot sample n_sample > prob_dist.size(-1) samples without replacement"
            )
        rng = python_rng(self.generator)
        indices = range(len(w))
        if self.replacement:
            cumulative = list(itertools.accumulate(w.tolist()))
            for k in chunks(self.num_samples):
                yield from rng.choices(indices, cum_weights=cumulative, k=k)
            return
        # Drawing one index at a time, each with probability proportional to the weights
        # left, orders the indices as the keys E_i / w_i with E_i ~ Exp(1) do (Efraimidis and
        # Spirakis): O(n log k) where redrawing from what is left would be O(n k). Once the
        # weighted indices are used up, as in PyTorch, the rest are drawn uniformly.
        weights = w.tolist()
        keys = [(rng.expovariate(1.0) / wi, i) for i, wi in enumerate(weights) if wi > 0]
        picked = [i for _, i in heapq.nsmallest(self.num_samples, keys)]
        if len(picked) < self.num_samples:
            zeros = [i for i, wi in enumerate(weights) if wi == 0]
            picked += rng.sample(zeros, self.num_samples - len(picked))
        yield from picked

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Groups the indices of `sampler` into lists of `batch_size`; the last, shorter list is
    kept unless `drop_last`."""

    def __init__(self, sampler: Sampler | Iterable[int], batch_size: int, drop_last: bool) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(
                f"batch_size should be a positive integer value, but got batch_size={batch_size}"
            )
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.sampler) // self.batch_size  # type: ignore[arg-type]
        return -(-len(self.sampler) // self.batch_size)  # type: ignore[arg-type]
