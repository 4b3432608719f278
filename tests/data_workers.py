"""Datasets for the DataLoader worker tests. They live in their own light module because
worker processes are spawned: each one imports the module that defines its dataset."""

import time

import gradstream as gs
from gradstream.utils.data import Dataset, IterableDataset, get_worker_info


class WhoLoaded(Dataset):
    """Sample i: (i, the loading worker's id, its num_workers, its seed, whether its dataset
    is this dataset); -1 for each of those in the main process."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        info = get_worker_info()
        if info is None:
            return i, -1, -1, -1, -1
        return i, info.id, info.num_workers, info.seed, int(isinstance(info.dataset, WhoLoaded))


class Squares(Dataset):
    """Sample i: a float tensor [i, i*i] and the int label i % 3; index `bad` raises
    ValueError."""

    def __init__(self, n, bad=None):
        self.n = n
        self.bad = bad

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.bad:
            raise ValueError(f"bad sample {i}")
        return gs.tensor([float(i), float(i * i)]), i % 3


class Stream(IterableDataset):
    """range(n), the whole of it from every worker unless `shard`, then split by worker id."""

    def __init__(self, n, shard=False):
        self.n = n
        self.shard = shard

    def __iter__(self):
        info = get_worker_info()
        if not self.shard or info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))

    def __len__(self):
        return self.n


INITIALIZED_AS = None


def remember_worker(worker_id):
    """A worker_init_fn: records its worker id where `SeenInit` reads it."""
    global INITIALIZED_AS
    INITIALIZED_AS = worker_id


class SeenInit(Dataset):
    """Sample i: what `remember_worker` recorded in the loading process (-1: nothing)."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return -1 if INITIALIZED_AS is None else INITIALIZED_AS


class Slow(Dataset):
    """Takes `seconds` per sample."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __len__(self):
        return 2

    def __getitem__(self, i):
        time.sleep(self.seconds)
        return i
