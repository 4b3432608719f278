"""What runs inside a DataLoader worker process, and `get_worker_info`."""

from __future__ import annotations

import random
import sys
import traceback

import gradstream

from ._fetch import IterableFetcher, fetch_map

__all__ = ["WorkerInfo", "get_worker_info"]

_worker_info: WorkerInfo | None = None


class WorkerInfo:
    """Who a worker is: `id`, `num_workers`, `seed` and its copy of the `dataset`."""

    __initialized = False

    def __init__(self, **kwargs) -> None:
        for name, value in kwargs.items():
            setattr(self, name, value)
        self.__keys = tuple(kwargs)
        self.__initialized = True

    def __setattr__(self, name, value):
        if self.__initialized:
            raise RuntimeError(f"Cannot assign attributes to {type(self).__name__} objects")
        super().__setattr__(name, value)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)}" for k in self.__keys)
        return f"{type(self).__name__}({fields})"


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker process, its `WorkerInfo`; in the main process, None."""
    return _worker_info


class ExceptionWrapper:
    """An exception raised in a worker, carried to the main process with its traceback."""

    def __init__(self, exc_info, where: str) -> None:
        self.exc_type = exc_info[0]
        self.message = "".join(traceback.format_exception(*exc_info))
        self.where = where

    def reraise(self):
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.message}"
        try:
            exception = self.exc_type(msg)
        except Exception:
            raise RuntimeError(msg) from None
        raise exception


class IterationEnd:
    """A worker's answer once its copy of an iterable dataset is exhausted."""


def _seed_everything(seed: int) -> None:
    gradstream.manual_seed(seed)
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % 2**32)


def worker_loop(
    dataset,
    is_iterable: bool,
    index_queue,
    result_queue,
    auto_collation: bool,
    collate_fn,
    batch_size,
    drop_last: bool,
    seed: int,
    init_fn,
    worker_id: int,
    num_workers: int,
) -> None:
    """Answers tasks `(epoch, task_idx, index)` with `(epoch, task_idx, batch)` until it is
    sent None. An iterable dataset restarts its iteration when the epoch changes."""
    global _worker_info
    try:
        _seed_everything(seed)
        _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
        init_error = None
        try:
            if init_fn is not None:
                init_fn(worker_id)
        except Exception:
            init_error = ExceptionWrapper(
                sys.exc_info(), f"in DataLoader worker process {worker_id}"
            )
        epoch, fetcher = None, None
        while True:
            task = index_queue.get()
            if task is None:
                break
            task_epoch, task_idx, index = task
            if init_error is not None:
                result_queue.put((task_epoch, task_idx, init_error))
                continue
            try:
                if is_iterable:
                    if task_epoch != epoch:
                        fetcher = IterableFetcher(
                            dataset, auto_collation, collate_fn, batch_size, drop_last
                        )
                        epoch = task_epoch
                    try:
                        data = fetcher.fetch()
                    except StopIteration:
                        data = IterationEnd()
                else:
                    data = fetch_map(dataset, index, auto_collation, collate_fn)
            except Exception:
                data = ExceptionWrapper(sys.exc_info(), f"in DataLoader worker process {worker_id}")
            result_queue.put((task_epoch, task_idx, data))
            del data
    except KeyboardInterrupt:  # the main process handles Ctrl-C and shuts the workers down
        pass
    finally:
        result_queue.cancel_join_thread()
        result_queue.close()
