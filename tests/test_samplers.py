"""Samplers draw as they are consumed, where PyTorch's do: `RandomSampler` and
`WeightedRandomSampler` with replacement take `num_samples` far beyond memory (minGPT's
trainer asks for 10**10), and what they draw is uniform, or follows the weights, and
replays from a seed. Lengths and index ranges are compared with torch.utils.data."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.utils.data as tdata  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import gradstream as gs  # noqa: E402
import gradstream.utils.data as gdata  # noqa: E402

HUGE = 10**10
# In this process, enough draws that an eager sampler is merely slow, not fatal.
MANY = 10**6

# Run with its address space capped, so an eager draw of HUGE indices fails with a
# MemoryError (or an abort) in the child instead of taking the machine's memory.
HUGE_SCRIPT = textwrap.dedent(
    """
    import itertools, json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, 8 * 2**30))
    import gradstream.utils.data as gdata

    HUGE = 10**10
    out = {}
    s = gdata.RandomSampler(range(10), replacement=True, num_samples=HUGE)
    out["random"] = [len(s), list(itertools.islice(s, 100))]
    w = gdata.WeightedRandomSampler([1.0, 0.0, 3.0], HUGE)
    out["weighted"] = [len(w), list(itertools.islice(w, 100))]
    b = gdata.BatchSampler(s, 64, drop_last=False)
    out["batches"] = [len(b), [len(x) for x in itertools.islice(b, 3)]]
    loader = gdata.DataLoader(list(range(10)), batch_size=4, sampler=s)
    out["loader"] = [len(loader), next(iter(loader)).tolist()]
    print(json.dumps(out))
    """
)


def test_huge_num_samples_are_drawn_lazily(tmp_path):
    script = tmp_path / "huge.py"
    script.write_text(HUGE_SCRIPT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(gs.__file__).parent.parent), env.get("PYTHONPATH", "")]
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    length, first = got["random"]
    assert length == len(tdata.RandomSampler(range(10), True, HUGE)) == HUGE
    assert len(first) == 100 and set(first) <= set(range(10))
    length, first = got["weighted"]
    assert length == len(tdata.WeightedRandomSampler([1.0, 0.0, 3.0], HUGE)) == HUGE
    assert len(first) == 100 and set(first) <= {0, 2}
    length, sizes = got["batches"]
    torch_batches = tdata.BatchSampler(tdata.RandomSampler(range(10), True, HUGE), 64, False)
    assert length == len(torch_batches) and sizes == [64, 64, 64]
    length, batch = got["loader"]
    assert length == HUGE // 4 and len(batch) == 4


def _chi_square(draws, n):
    counts = [0] * n
    for i in draws:
        counts[i] += 1
    expected = len(draws) / n
    return sum((c - expected) ** 2 / expected for c in counts)


def test_draws_with_replacement_are_uniform():
    # 20 bins, 19 degrees of freedom: P(chi2 > 60) is about 2e-6 for a uniform draw, and
    # the draws are seeded, so only a sampler that favours or misses indices fails.
    n, k = 20, 20_000
    for generator in (None, gs.Generator().manual_seed(1), torch.Generator().manual_seed(1)):
        gs.manual_seed(0)
        draws = list(gdata.RandomSampler(range(n), True, k, generator=generator))
        assert _chi_square(draws, n) < 60, generator
    torch.manual_seed(0)
    assert _chi_square(list(tdata.RandomSampler(range(n), True, k)), n) < 60


def test_weighted_draws_follow_the_weights():
    weights = [1.0, 2.0, 0.0, 3.0, 4.0]
    k = 20_000  # a frequency's standard deviation is at most 0.0036; the bound is 0.02
    for lib, data in ((gs, gdata), (torch, tdata)):
        lib.manual_seed(0)
        draws = list(data.WeightedRandomSampler(weights, k))
        freqs = [draws.count(i) / k for i in range(len(weights))]
        assert freqs[2] == 0
        for f, w in zip(freqs, weights, strict=True):
            assert abs(f - w / sum(weights)) < 0.02, (lib.__name__, freqs)


def test_same_seed_same_stream():
    def stream(global_seed, generator=None):
        gs.manual_seed(global_seed)
        sampler = gdata.RandomSampler(range(97), True, MANY, generator=generator)
        return list(itertools.islice(sampler, 1000))

    assert stream(3) == stream(3) != stream(4)

    def seeded(seed):
        return gs.Generator().manual_seed(seed)

    # with a generator, the global seed plays no part
    assert stream(3, seeded(5)) == stream(4, seeded(5)) != stream(3, seeded(6))


@pytest.mark.parametrize("lib, data", [(gs, gdata), (torch, tdata)], ids=["gradstream", "torch"])
def test_without_a_generator_an_epoch_is_fixed_when_it_starts(lib, data):
    # As in PyTorch: the epoch's order does not depend on other draws from the global RNG
    # while it runs (dropout between batches), and drawing more of it does not move that RNG.
    def draw(count, interleave):
        lib.manual_seed(3)
        it = iter(data.RandomSampler(range(50), True, MANY))
        order = []
        for _ in range(count):
            order.append(next(it))
            if interleave:
                lib.rand(3)
        return order, lib.rand(2).tolist() if not interleave else None

    (order, after_short), (longer, after_long) = draw(40, False), draw(400, False)
    assert longer[:40] == order
    assert after_short == after_long
    assert draw(40, True)[0] == order


def test_weighted_draws_without_replacement_follow_the_weights():
    # The first of each draw is index i with probability w_i / sum(w); the second, given
    # the first was j, with probability w_i / (sum(w) - w_j).
    weights = [1.0, 2.0, 0.0, 3.0, 4.0]
    trials = 4000  # a frequency's standard deviation is at most 0.008; the bound is 0.035
    for lib, data in ((gs, gdata), (torch, tdata)):
        lib.manual_seed(0)
        draws = [list(data.WeightedRandomSampler(weights, 2, False)) for _ in range(trials)]
        first = [sum(d[0] == i for d in draws) / trials for i in range(len(weights))]
        for f, w in zip(first, weights, strict=True):
            assert abs(f - w / sum(weights)) < 0.035, (lib.__name__, first)
        after_4 = [d[1] for d in draws if d[0] == 4]
        second = [after_4.count(i) / len(after_4) for i in range(len(weights))]
        for i, w in enumerate(weights[:4]):
            assert abs(second[i] - w / 6.0) < 0.05, (lib.__name__, second)


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(1, 12),
    num_samples=st.integers(1, 60),
    replacement=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_random_sampler_length_and_indices(n, num_samples, replacement, seed):
    gs.manual_seed(seed)
    sampler = gdata.RandomSampler(range(n), replacement, num_samples)
    drawn = list(sampler)
    theirs = list(tdata.RandomSampler(range(n), replacement, num_samples))
    assert len(sampler) == len(drawn) == len(theirs) == num_samples
    assert set(drawn) <= set(range(n))
    if not replacement:  # whole permutations, then the head of one more
        for start in range(0, num_samples - num_samples % n, n):
            assert sorted(drawn[start : start + n]) == list(range(n))
        tail = drawn[num_samples - num_samples % n :]
        assert len(set(tail)) == len(tail)


@settings(max_examples=50, deadline=None)
@given(
    weights=st.lists(st.sampled_from([0.0, 0.5, 1.0, 7.0]), min_size=1, max_size=8).filter(any),
    data=st.data(),
)
def test_weighted_sampler_length_and_indices(weights, data):
    replacement = data.draw(st.booleans())
    top = 60 if replacement else len(weights)
    num_samples = data.draw(st.integers(1, top))
    sampler = gdata.WeightedRandomSampler(weights, num_samples, replacement)
    drawn = list(sampler)
    theirs = tdata.WeightedRandomSampler(weights, num_samples, replacement)
    assert len(sampler) == len(drawn) == len(list(theirs)) == num_samples
    assert set(drawn) <= set(range(len(weights)))
    positive = [i for i, w in enumerate(weights) if w > 0]
    if replacement:
        assert set(drawn) <= set(positive)
    else:  # no index twice, and the weighted ones before any of weight 0
        assert len(set(drawn)) == num_samples
        assert set(drawn[: len(positive)]) <= set(positive)


@settings(max_examples=30, deadline=None)
@given(indices=st.lists(st.integers(-5, 100), max_size=20), seed=st.integers(0, 2**31))
def test_subset_random_sampler_is_a_permutation(indices, seed):
    gs.manual_seed(seed)
    sampler = gdata.SubsetRandomSampler(indices)
    assert sorted(sampler) == sorted(indices)
    assert len(sampler) == len(tdata.SubsetRandomSampler(indices))


def _stream(data, length):
    """An iterable dataset of `data` (gradstream's or PyTorch's) that says it has `length`."""

    class Stream(data.IterableDataset):
        def __iter__(self):
            return iter(range(5))

        def __len__(self):
            return length

    return Stream()


@pytest.mark.parametrize("length", [0, 1, 7, 2**60 + 1])
@pytest.mark.parametrize("drop_last", [False, True])
def test_loader_length_of_a_long_iterable_dataset_is_exact(length, drop_last):
    loader = gdata.DataLoader(_stream(gdata, length), batch_size=3, drop_last=drop_last)
    exact = length // 3 if drop_last else -(-length // 3)
    assert len(loader) == exact
    if length < 2**53:  # beyond, PyTorch's float ceil rounds
        theirs = tdata.DataLoader(_stream(tdata, length), batch_size=3, drop_last=drop_last)
        assert len(theirs) == exact
