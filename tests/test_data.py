"""gradstream.utils.data against torch.utils.data: datasets, samplers, collation, DataLoader
lengths, batches, argument errors and worker processes."""

from __future__ import annotations

import collections
import re
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")

import torch.utils.data as tdata  # noqa: E402
from data_workers import SeenInit, Slow, Squares, Stream, WhoLoaded, remember_worker  # noqa: E402
from helpers import assert_close, to_numpy  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import gradstream as gs  # noqa: E402
import gradstream.utils.data as gdata  # noqa: E402
from gradstream.utils.data import DataLoader  # noqa: E402

Point = collections.namedtuple("Point", "x y")


def outcome(fn):
    """("ok", value) or ("error", exception class name, message without object addresses)."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        return ("error", type(e).__name__, re.sub(r"<[^>]*>", "<obj>", str(e)))


def both(make):
    """`make(lib, module)` called for gradstream and for PyTorch."""
    return outcome(lambda: make(gs, gdata)), outcome(lambda: make(torch, tdata))


def as_lists(batches):
    return [
        [to_numpy(t).tolist() for t in b] if isinstance(b, list) else to_numpy(b).tolist()
        for b in batches
    ]


def pair_dataset(lib, module, n):
    x = lib.arange(2 * n, dtype=lib.float32).reshape(n, 2) if n else lib.zeros(0, 2)
    return module.TensorDataset(x, lib.arange(n))


def make_torch_stream(n, shard=False):
    class TorchStream(tdata.IterableDataset):
        def __iter__(self):
            info = tdata.get_worker_info()
            if not shard or info is None:
                return iter(range(n))
            return iter(range(info.id, n, info.num_workers))

        def __len__(self):
            return n

    return TorchStream()


def assert_same_structure(ours, theirs):
    """Same nesting, container types, tensor dtypes and values, and equal leaves."""
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, gs.Tensor), f"{type(ours)} is not a tensor"
        assert_close(ours, theirs)
    elif isinstance(theirs, dict):
        assert type(ours) is type(theirs) and ours.keys() == theirs.keys()
        for k in theirs:
            assert_same_structure(ours[k], theirs[k])
    elif isinstance(theirs, list | tuple):
        assert type(ours) is type(theirs), f"{type(ours)} != {type(theirs)}"
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            assert_same_structure(a, b)
    else:
        assert ours == theirs


# --- datasets ---------------------------------------------------------------------------------


def test_tensor_dataset_items_and_size_mismatch():
    ours = pair_dataset(gs, gdata, 5)
    theirs = pair_dataset(torch, tdata, 5)
    assert len(ours) == len(theirs) == 5
    for i in range(-5, 5):
        for a, b in zip(ours[i], theirs[i], strict=True):
            assert_close(a, b)
    mismatch = both(lambda lib, m: m.TensorDataset(lib.zeros(3), lib.zeros(4)))
    assert (
        mismatch[0] == mismatch[1] == ("error", "AssertionError", "Size mismatch between tensors")
    )


def test_concat_dataset_indices_and_errors():
    parts = [list(range(3)), [], list(range(10, 14))]
    ours, theirs = gdata.ConcatDataset(parts), tdata.ConcatDataset(parts)
    assert len(ours) == len(theirs) == 7
    assert ours.cumulative_sizes == theirs.cumulative_sizes
    for i in range(-9, 9):
        assert outcome(lambda i=i: ours[i]) == outcome(lambda i=i: theirs[i]), i
    empty = both(lambda lib, m: m.ConcatDataset([]))
    assert empty[0] == empty[1] and empty[0][1] == "AssertionError"
    stream = outcome(lambda: gdata.ConcatDataset([Stream(3)]))
    assert stream == outcome(lambda: tdata.ConcatDataset([make_torch_stream(3)]))
    assert stream[1] == "AssertionError"
    added = gdata.TensorDataset(gs.arange(2)) + gdata.TensorDataset(gs.arange(3))
    assert isinstance(added, gdata.ConcatDataset) and len(added) == 5


def test_chain_dataset_and_subset():
    ours = gdata.ChainDataset([Stream(3), Stream(2)])
    theirs = tdata.ChainDataset([make_torch_stream(3), make_torch_stream(2)])
    assert list(ours) == list(theirs) and len(ours) == len(theirs) == 5
    assert isinstance(Stream(2) + Stream(1), gdata.ChainDataset)
    data = list(range(10, 20))
    assert list(gdata.Subset(data, [4, 0, 9])) == list(tdata.Subset(data, [4, 0, 9]))
    assert len(gdata.Subset(data, [1, 2])) == 2


def test_stack_dataset():
    a, b = list(range(4)), list("abcd")
    assert gdata.StackDataset(a, b)[2] == tdata.StackDataset(a, b)[2]
    assert gdata.StackDataset(x=a, y=b)[3] == tdata.StackDataset(x=a, y=b)[3]
    assert len(gdata.StackDataset(a, b)) == 4
    for make in (
        lambda lib, m: m.StackDataset(a, [1]),
        lambda lib, m: m.StackDataset(),
        lambda lib, m: m.StackDataset(a, y=b),
    ):
        ours, theirs = both(make)
        assert ours == theirs and ours[0] == "error"


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 30), data=st.data())
def test_random_split_lengths_match_torch(n, data):
    k = data.draw(st.integers(1, 5))
    if data.draw(st.booleans()):
        cuts = sorted(data.draw(st.lists(st.integers(0, n), min_size=k - 1, max_size=k - 1)))
        lengths = [b - a for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
        if data.draw(st.booleans()):
            lengths[0] += 1  # a sum that is off by one
    else:
        weights = data.draw(st.lists(st.integers(0, 10), min_size=k, max_size=k))
        total = sum(weights) or 1
        lengths = [w / total for w in weights]
    with warnings.catch_warnings():  # random_split warns about empty splits
        warnings.simplefilter("ignore")
        ours = outcome(lambda: [len(s) for s in gdata.random_split(range(n), lengths)])
        theirs = outcome(lambda: [len(s) for s in tdata.random_split(range(n), lengths)])
    assert ours[:2] == theirs[:2], lengths  # an error's message may differ: [0.0] for n=0
    if ours[0] == "ok":
        splits = gdata.random_split(list(range(n)), lengths)
        assert sorted(i for s in splits for i in s) == list(range(n))


def test_random_split_fraction_errors_and_generator():
    for lengths in ([1.5, -0.5], [0.5, 0.6], [3, 3]):
        assert outcome(lambda lengths=lengths: gdata.random_split(range(5), lengths)) == outcome(
            lambda lengths=lengths: tdata.random_split(range(5), lengths)
        )

    def split(seed):
        parts = gdata.random_split(
            range(20), [5, 15], generator=torch.Generator().manual_seed(seed)
        )
        return [list(p) for p in parts]

    assert split(1) == split(1)
    assert split(1) != split(2)


# --- samplers ---------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 25), batch_size=st.integers(1, 8), drop_last=st.booleans())
def test_batch_sampler_matches_torch(n, batch_size, drop_last):
    ours = gdata.BatchSampler(gdata.SequentialSampler(range(n)), batch_size, drop_last)
    theirs = tdata.BatchSampler(tdata.SequentialSampler(range(n)), batch_size, drop_last)
    assert list(ours) == list(theirs)
    assert len(ours) == len(theirs)


@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.BatchSampler(range(3), 0, False),
        lambda m: m.BatchSampler(range(3), 2, 1),
        lambda m: m.RandomSampler(range(3), replacement=1),
        lambda m: m.RandomSampler(range(3), num_samples=0),
        lambda m: m.RandomSampler([]),
        lambda m: m.WeightedRandomSampler([[1.0, 2.0]], 2),
        lambda m: m.WeightedRandomSampler([1.0, 2.0], 0),
        lambda m: m.WeightedRandomSampler([1.0, 2.0], 2, replacement="yes"),
        lambda m: list(m.WeightedRandomSampler([1.0, 2.0], 3, replacement=False)),
        lambda m: list(m.WeightedRandomSampler([1.0, -1.0], 3)),
        lambda m: list(m.WeightedRandomSampler([0.0, 0.0], 1)),
    ],
)
def test_sampler_argument_errors_match_torch(make):
    ours, theirs = outcome(lambda: make(gdata)), outcome(lambda: make(tdata))
    assert ours[0] == "error"
    assert ours == theirs


def test_random_sampler_is_a_permutation_and_reproducible():
    gs.manual_seed(7)
    first = list(gdata.RandomSampler(range(40)))
    second = list(gdata.RandomSampler(range(40)))
    assert sorted(first) == sorted(second) == list(range(40))
    assert first != second  # the global RNG moves on
    gs.manual_seed(7)
    assert list(gdata.RandomSampler(range(40))) == first

    def with_generator(seed):
        g = torch.Generator().manual_seed(seed)
        sampler = gdata.RandomSampler(range(40), generator=g)
        return list(sampler), list(sampler)

    epoch1, epoch2 = with_generator(3)
    assert sorted(epoch1) == sorted(epoch2) == list(range(40))
    assert epoch1 != epoch2
    assert with_generator(3) == (epoch1, epoch2)
    assert with_generator(4)[0] != epoch1


def test_random_sampler_num_samples_and_replacement():
    n, k = 10, 23
    for replacement in (False, True):
        ours = list(gdata.RandomSampler(range(n), replacement=replacement, num_samples=k))
        theirs = list(tdata.RandomSampler(range(n), replacement=replacement, num_samples=k))
        assert len(ours) == len(theirs) == k
        assert all(0 <= i < n for i in ours)
    # without replacement: whole permutations first, then part of another one
    ours = list(gdata.RandomSampler(range(n), num_samples=k))
    assert sorted(ours[:n]) == sorted(ours[n : 2 * n]) == list(range(n))
    assert len(set(ours[2 * n :])) == k - 2 * n


def test_subset_random_sampler():
    indices = [5, 9, 2, 7]
    drawn = list(gdata.SubsetRandomSampler(indices))
    assert sorted(drawn) == sorted(indices)
    assert len(gdata.SubsetRandomSampler(indices)) == len(tdata.SubsetRandomSampler(indices))


def test_weighted_random_sampler_draws_only_weighted_indices():
    weights = [0.0, 1.0, 0.0, 3.0]
    with_replacement = list(gdata.WeightedRandomSampler(weights, 200))
    assert set(with_replacement) == {1, 3}
    assert with_replacement.count(3) > with_replacement.count(1)
    assert sorted(gdata.WeightedRandomSampler(weights, 2, replacement=False)) == [1, 3]
    # once the weighted indices are used up, PyTorch draws the zero-weight ones
    everything = list(gdata.WeightedRandomSampler(weights, 4, replacement=False))
    assert sorted(everything) == [0, 1, 2, 3] and set(everything[:2]) == {1, 3}
    assert len(gdata.WeightedRandomSampler(gs.tensor(weights), 5)) == 5


# --- collation --------------------------------------------------------------------------------


def nested_batch(lib):
    return [
        {
            "x": lib.tensor([float(i), 2.0 * i]),
            "label": i,
            "weight": 0.5 * i,
            "flag": i % 2 == 0,
            "name": f"s{i}",
            "pair": (i, [1.5, float(i)]),
            "point": Point(np.float32(i), np.arange(3) + i),
            "image": np.full((2, 2), i, dtype=np.float64),
        }
        for i in range(3)
    ]


def test_default_collate_nested_matches_torch():
    assert_same_structure(
        gdata.default_collate(nested_batch(gs)), tdata.default_collate(nested_batch(torch))
    )


@pytest.mark.parametrize(
    "batch",
    [
        [1, 2, 3],
        [1.5, 2],
        [True, False],
        ["a", "b"],
        [np.int32(1), np.int32(2)],
        [np.float32(0.5), np.float32(1)],
        [(1, "x"), (2, "y")],
        [[1, 2], [3, 4]],
        [Point(1, 2.0), Point(3, 4.0)],
        [np.zeros((2, 3), np.float32), np.ones((2, 3), np.float32)],
    ],
    ids=repr,
)
def test_default_collate_leaves_match_torch(batch):
    assert_same_structure(gdata.default_collate(batch), tdata.default_collate(batch))


@pytest.mark.parametrize(
    "make",
    [
        lambda lib: [[1, 2], [3]],
        lambda lib: [object(), object()],
        lambda lib: [lib.zeros(2), lib.zeros(3)],
        lambda lib: [np.array(["a"]), np.array(["b"])],
    ],
)
def test_default_collate_errors_match_torch(make):
    ours = outcome(lambda: gdata.default_collate(make(gs)))
    theirs = outcome(lambda: tdata.default_collate(make(torch)))
    assert ours[0] == "error"
    assert ours == theirs


def test_default_convert_matches_torch():
    sample = (np.arange(3), 4, "s", [np.float64(1.0)], {"a": np.ones(2)}, Point(np.zeros(1), 2))
    assert_same_structure(gdata.default_convert(sample), tdata.default_convert(sample))
    t = gs.ones(2)
    assert gdata.default_convert(t) is t


# --- DataLoader -------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(0, 30),
    batch_size=st.one_of(st.none(), st.integers(1, 12)),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
)
def test_len_and_batch_shapes_match_torch(n, batch_size, drop_last, shuffle):
    def load(lib, m):
        loader = m.DataLoader(
            pair_dataset(lib, m, n), batch_size=batch_size, drop_last=drop_last, shuffle=shuffle
        )
        return len(loader), [[tuple(t.shape) for t in b] for b in loader]

    ours, theirs = both(load)
    assert ours == theirs


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 30),
    batch_size=st.one_of(st.none(), st.integers(1, 12)),
    drop_last=st.booleans(),
)
def test_iterable_dataset_len_and_batches_match_torch(n, batch_size, drop_last):
    def load(dataset, m):
        loader = m.DataLoader(dataset, batch_size=batch_size, drop_last=drop_last)
        return len(loader), as_lists(loader)

    ours = outcome(lambda: load(Stream(n), gdata))
    theirs = outcome(lambda: load(make_torch_stream(n), tdata))
    assert ours == theirs


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 30), batch_size=st.integers(1, 12), drop_last=st.booleans())
def test_sequential_batches_match_torch(n, batch_size, drop_last):
    ours = list(DataLoader(pair_dataset(gs, gdata, n), batch_size=batch_size, drop_last=drop_last))
    theirs = list(
        tdata.DataLoader(pair_dataset(torch, tdata, n), batch_size=batch_size, drop_last=drop_last)
    )
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert isinstance(a, list) and len(a) == len(b) == 2
        for x, y in zip(a, b, strict=True):
            assert_close(x, y)


def test_no_auto_batching_converts_samples():
    ours = list(DataLoader([np.arange(2), np.arange(2) + 2], batch_size=None))
    theirs = list(tdata.DataLoader([np.arange(2), np.arange(2) + 2], batch_size=None))
    assert_same_structure(ours, theirs)


def test_batch_sampler_and_custom_collate():
    sampler = gdata.BatchSampler(gdata.SequentialSampler(range(7)), 3, False)
    loader = DataLoader(list(range(7)), batch_sampler=sampler, collate_fn=list)
    assert list(loader) == [[0, 1, 2], [3, 4, 5], [6]]
    assert len(loader) == 3


def _sampler(m, ds):
    return m.SequentialSampler(ds)


@pytest.mark.parametrize(
    "kwargs",
    [
        lambda m, ds: {"batch_sampler": m.BatchSampler(_sampler(m, ds), 2, False), "batch_size": 2},
        lambda m, ds: {"batch_sampler": m.BatchSampler(_sampler(m, ds), 2, False), "shuffle": True},
        lambda m, ds: {
            "batch_sampler": m.BatchSampler(_sampler(m, ds), 2, False),
            "drop_last": True,
        },
        lambda m, ds: {
            "batch_sampler": m.BatchSampler(_sampler(m, ds), 2, False),
            "sampler": _sampler(m, ds),
        },
        lambda m, ds: {"sampler": _sampler(m, ds), "shuffle": True},
        lambda m, ds: {"batch_size": None, "drop_last": True},
        lambda m, ds: {"num_workers": -1},
        lambda m, ds: {"timeout": -1},
        lambda m, ds: {"prefetch_factor": 2},
        lambda m, ds: {"persistent_workers": True},
        lambda m, ds: {"multiprocessing_context": "spawn"},
        lambda m, ds: {"batch_size": 0},
    ],
)
def test_conflicting_arguments_match_torch(kwargs):
    ours, theirs = both(
        lambda lib, m: m.DataLoader(pair_dataset(lib, m, 4), **kwargs(m, pair_dataset(lib, m, 4)))
    )
    assert ours[0] == "error"
    assert ours == theirs


@pytest.mark.parametrize(
    "kwargs",
    [
        lambda m, ds: {"shuffle": True},
        lambda m, ds: {"sampler": m.SequentialSampler(range(3))},
        lambda m, ds: {"batch_sampler": m.BatchSampler(range(3), 2, False)},
    ],
)
def test_iterable_dataset_argument_errors_match_torch(kwargs):
    ours = outcome(lambda: DataLoader(Stream(3), **kwargs(gdata, None)))
    theirs = outcome(lambda: tdata.DataLoader(make_torch_stream(3), **kwargs(tdata, None)))
    assert ours[0] == "error"
    assert ours == theirs


def test_attributes_are_fixed_after_init():
    loader = DataLoader(list(range(4)), batch_size=2)
    with pytest.raises(ValueError, match="batch_size attribute should not be set"):
        loader.batch_size = 3
    assert outcome(lambda: setattr(loader, "drop_last", True)) == outcome(
        lambda: setattr(tdata.DataLoader(list(range(4))), "drop_last", True)
    )


def test_shuffled_epochs_are_permutations_and_reproducible():
    dataset = gdata.TensorDataset(gs.arange(50))
    loader = DataLoader(dataset, batch_size=7, shuffle=True)

    def epoch():
        return [i for (batch,) in loader for i in batch.tolist()]

    gs.manual_seed(11)
    first, second = epoch(), epoch()
    assert sorted(first) == sorted(second) == list(range(50))
    assert first != second
    gs.manual_seed(11)
    assert epoch() == first
    seeded = DataLoader(
        dataset, batch_size=7, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    again = DataLoader(
        dataset, batch_size=7, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    assert as_lists(seeded) == as_lists(again)


# --- worker processes -------------------------------------------------------------------------


def test_workers_return_the_batches_of_the_main_process():
    for shuffle in (False, True):
        gs.manual_seed(5)
        main = as_lists(DataLoader(Squares(11), batch_size=3, shuffle=shuffle))
        gs.manual_seed(5)
        workers = DataLoader(Squares(11), batch_size=3, shuffle=shuffle, num_workers=2)
        assert len(workers) == 4
        assert as_lists(workers) == main


def test_persistent_workers_serve_every_epoch():
    loader = DataLoader(Squares(7), batch_size=2, num_workers=2, persistent_workers=True)
    expected = as_lists(DataLoader(Squares(7), batch_size=2))
    assert as_lists(loader) == expected
    assert as_lists(loader) == expected


def test_get_worker_info_inside_workers():
    assert gdata.get_worker_info() is None
    batches = list(DataLoader(WhoLoaded(8), batch_size=2, num_workers=2))
    seeds = {}
    for k, (index, worker_id, num_workers, seed, own_dataset) in enumerate(batches):
        assert index.tolist() == [2 * k, 2 * k + 1]
        assert worker_id.tolist() == [k % 2] * 2  # batches go to the workers in turn
        assert num_workers.tolist() == [2, 2]
        assert own_dataset.tolist() == [1, 1]
        seeds.setdefault(k % 2, set()).update(seed.tolist())
    assert len(seeds[0]) == len(seeds[1]) == 1 and seeds[0] != seeds[1]
    assert gdata.get_worker_info() is None


@pytest.mark.parametrize("shard", [False, True])
def test_iterable_dataset_with_workers_matches_torch(shard):
    ours = DataLoader(Stream(10, shard), batch_size=3, num_workers=2)
    theirs = tdata.DataLoader(make_torch_stream(10, shard), batch_size=3, num_workers=2)
    assert as_lists(ours) == as_lists(theirs)


def test_worker_exception_reaches_the_main_process():
    loader = iter(DataLoader(Squares(20, bad=13), batch_size=4, num_workers=2))
    for _ in range(3):
        next(loader)
    with pytest.raises(ValueError, match="bad sample 13"):
        next(loader)


def test_worker_init_fn_runs_in_each_worker():
    loader = DataLoader(SeenInit(), batch_size=1, num_workers=2, worker_init_fn=remember_worker)
    assert [b.item() for b in loader] == [0, 1, 0, 1]
    assert [b.item() for b in DataLoader(SeenInit(), batch_size=1)] == [-1] * 4


def test_timeout_waiting_for_a_worker():
    loader = DataLoader(Slow(1.0), batch_size=1, num_workers=1, timeout=0.2)
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 0.2 seconds"):
        next(iter(loader))


def test_gradstream_generator_drives_shuffling():
    from gradstream.utils.data import DataLoader, RandomSampler, random_split

    def order(seed):
        return list(RandomSampler(range(50), generator=gs.Generator().manual_seed(seed)))

    assert order(7) == order(7) and order(7) != order(8)
    assert sorted(order(7)) == list(range(50))
    g = gs.Generator().manual_seed(1)
    first = [
        b.tolist() for b in DataLoader(list(range(10)), batch_size=5, shuffle=True, generator=g)
    ]
    second = [
        b.tolist() for b in DataLoader(list(range(10)), batch_size=5, shuffle=True, generator=g)
    ]
    assert first != second  # the generator moved on: the next epoch is another order
    parts = random_split(range(10), [3, 7], generator=gs.Generator().manual_seed(2))
    again = random_split(range(10), [3, 7], generator=gs.Generator().manual_seed(2))
    assert [list(p) for p in parts] == [list(p) for p in again]
