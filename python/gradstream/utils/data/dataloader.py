"""`DataLoader`: batches from a dataset, in the main process or in worker processes."""

from __future__ import annotations

import multiprocessing
import queue
import time
import warnings

from . import _worker
from ._collate import default_collate, default_convert
from ._fetch import IterableFetcher, fetch_map
from ._random import base_seed
from .dataset import Dataset, IterableDataset
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["DataLoader"]

# How often a waiting main process checks that its workers are still alive.
_POLL_SECONDS = 5.0


class _InfiniteConstantSampler(Sampler):
    """An iterable dataset's sampler: it has no indices, so it yields None forever."""

    def __iter__(self):
        while True:
            yield None


class DataLoader:
    """Iterates over a dataset in batches, as PyTorch's `torch.utils.data.DataLoader`.

    Differences from PyTorch: `pin_memory` has no effect (there is no accelerator to pin
    for). Worker processes start with the platform's default method (fork on Linux) unless
    `multiprocessing_context` says otherwise; a forked worker runs its kernels on its own
    thread, as PyTorch's workers run with one intra-op thread.
    """

    _initialized = False

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler | None = None,
        batch_sampler: Sampler | None = None,
        num_workers: int = 0,
        collate_fn=None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn=None,
        multiprocessing_context=None,
        generator=None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
    ) -> None:
        if num_workers < 0:
            raise ValueError(
                "num_workers option should be non-negative; "
                "use num_workers=0 to disable multiprocessing."
            )
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified in multiprocessing."
                "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor "
                "to None."
            )
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        if prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")

        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context

        if isinstance(dataset, IterableDataset):
            if shuffle not in {False, None}:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified shuffle option, "
                    f"but got shuffle={shuffle}"
                )
            if sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified sampler option, "
                    f"but got sampler={sampler}"
                )
            if batch_sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified batch_sampler "
                    f"option, but got batch_sampler={batch_sampler}"
                )
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, "
                    "sampler, and drop_last"
                )
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError(
                "batch_size=None option disables auto-batching and is mutually exclusive "
                "with drop_last"
            )

        if sampler is None:
            if isinstance(dataset, IterableDataset):
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self._iterator = None
        self._initialized = True

        if pin_memory:
            warnings.warn(
                "'pin_memory' argument is set as true but no accelerator is found, "
                "then device pinned memory won't be used.",
                stacklevel=2,
            )

    def __setattr__(self, name, value):
        if self._initialized and name in (
            "batch_size",
            "batch_sampler",
            "sampler",
            "drop_last",
            "dataset",
            "persistent_workers",
        ):
            raise ValueError(
                f"{name} attribute should not be set after {type(self).__name__} is initialized"
            )
        super().__setattr__(name, value)

    @property
    def multiprocessing_context(self):
        return self._multiprocessing_context

    @multiprocessing_context.setter
    def multiprocessing_context(self, context) -> None:
        if context is not None:
            if self.num_workers == 0:
                raise ValueError(
                    "multiprocessing_context can only be used with multi-process loading "
                    f"(num_workers > 0), but got num_workers={self.num_workers}"
                )
            if isinstance(context, str):
                context = multiprocessing.get_context(context)
        self._multiprocessing_context = context

    @property
    def _auto_collation(self) -> bool:
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def __iter__(self):
        if self.num_workers == 0:
            return _SingleProcessIter(self)
        if not self.persistent_workers:
            return _MultiProcessIter(self)
        if self._iterator is None:
            self._iterator = _MultiProcessIter(self)
        else:
            self._iterator._start_epoch(self)
        return self._iterator

    def __len__(self) -> int:
        if isinstance(self.dataset, IterableDataset):
            length = len(self.dataset)  # type: ignore[arg-type]
            if self.batch_size is not None:
                if self.drop_last:
                    return length // self.batch_size
                return -(-length // self.batch_size)  # exact, where a float ceil is not
            return length
        return len(self._index_sampler)


class _BaseIter:
    def __init__(self, loader: DataLoader) -> None:
        self._is_iterable = isinstance(loader.dataset, IterableDataset)
        self._dataset = loader.dataset
        self._auto_collation = loader._auto_collation
        self._collate_fn = loader.collate_fn
        self._batch_size = loader.batch_size
        self._drop_last = loader.drop_last
        self._length = loader.__len__
        # Drawn whether or not there are workers, so that a shuffled order does not depend
        # on num_workers.
        self._base_seed = base_seed(loader.generator)

    def __iter__(self):
        return self

    def __len__(self) -> int:
        return self._length()


class _SingleProcessIter(_BaseIter):
    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        if self._is_iterable:
            self._fetcher = IterableFetcher(
                self._dataset,
                self._auto_collation,
                self._collate_fn,
                self._batch_size,
                self._drop_last,
            )
        else:
            self._indices = iter(loader._index_sampler)

    def __next__(self):
        if self._is_iterable:
            return self._fetcher.fetch()
        index = next(self._indices)
        return fetch_map(self._dataset, index, self._auto_collation, self._collate_fn)


class _MultiProcessIter(_BaseIter):
    """Worker processes, each with its own task queue, and one queue of results.

    Tasks go to the workers round-robin, at most `prefetch_factor` per worker ahead of the
    consumer; results are put back in task order. For an iterable dataset every worker
    iterates its own copy, and a worker that has run out is skipped from then on.
    """

    def __init__(self, loader: DataLoader) -> None:
        super().__init__(loader)
        self._num_workers = loader.num_workers
        self._prefetch = loader.prefetch_factor * loader.num_workers
        self._timeout = loader.timeout
        self._persistent = loader.persistent_workers
        context = loader.multiprocessing_context or multiprocessing.get_context()
        self._shutdown = False
        self._result_queue = context.Queue()
        self._index_queues = []
        self._workers = []
        for worker_id in range(self._num_workers):
            index_queue = context.Queue()
            index_queue.cancel_join_thread()
            worker = context.Process(
                target=_worker.worker_loop,
                args=(
                    self._dataset,
                    self._is_iterable,
                    index_queue,
                    self._result_queue,
                    self._auto_collation,
                    self._collate_fn,
                    self._batch_size,
                    self._drop_last,
                    self._base_seed + worker_id,
                    loader.worker_init_fn,
                    worker_id,
                    self._num_workers,
                ),
                daemon=True,
            )
            worker.start()
            self._index_queues.append(index_queue)
            self._workers.append(worker)
        self._epoch = -1
        self._start_epoch(loader)

    def _start_epoch(self, loader: DataLoader) -> None:
        self._epoch += 1
        self._indices = None if self._is_iterable else iter(loader._index_sampler)
        self._sent = 0
        self._received = 0
        self._task_worker: dict[int, int] = {}
        self._results: dict[int, object] = {}
        self._active = [True] * self._num_workers
        self._next_worker = 0
        for _ in range(self._prefetch):
            self._send_task()

    def _send_task(self) -> None:
        for _ in range(self._num_workers):
            worker_id = self._next_worker
            self._next_worker = (self._next_worker + 1) % self._num_workers
            if self._active[worker_id]:
                break
        else:
            return
        if self._indices is None:
            index = None
        else:
            index = next(self._indices, StopIteration)
            if index is StopIteration:
                return
        self._index_queues[worker_id].put((self._epoch, self._sent, index))
        self._task_worker[self._sent] = worker_id
        self._sent += 1

    def _get_result(self):
        """The next (epoch, task_idx, data) from any worker, watching for dead workers."""
        started = time.monotonic()
        while True:
            wait = _POLL_SECONDS
            if self._timeout > 0:
                wait = min(wait, self._timeout - (time.monotonic() - started))
            try:
                return self._result_queue.get(timeout=max(wait, 0))
            except queue.Empty:
                dead = [str(w.pid) for w in self._workers if not w.is_alive()]
                if dead:
                    self._shutdown_workers()
                    raise RuntimeError(
                        f"DataLoader worker (pid(s) {', '.join(dead)}) exited unexpectedly"
                    ) from None
                if self._timeout > 0 and time.monotonic() - started >= self._timeout:
                    raise RuntimeError(
                        f"DataLoader timed out after {self._timeout} seconds"
                    ) from None

    def __next__(self):
        while True:
            if self._received == self._sent:
                if not self._persistent:
                    self._shutdown_workers()
                raise StopIteration
            while self._received not in self._results:
                epoch, task_idx, data = self._get_result()
                if epoch == self._epoch:  # results of an abandoned epoch are dropped
                    self._results[task_idx] = data
            data = self._results.pop(self._received)
            worker_id = self._task_worker.pop(self._received)
            self._received += 1
            if isinstance(data, _worker.IterationEnd):
                self._active[worker_id] = False
                continue
            self._send_task()
            if isinstance(data, _worker.ExceptionWrapper):
                data.reraise()
            return data

    def _shutdown_workers(self) -> None:
        if self._shutdown:
            return
        self._shutdown = True
        for index_queue in self._index_queues:
            index_queue.put(None)
        for worker in self._workers:
            worker.join(timeout=_POLL_SECONDS)
            if worker.is_alive():
                worker.terminate()
        for q in [*self._index_queues, self._result_queue]:
            q.cancel_join_thread()
            q.close()

    def __del__(self) -> None:
        if hasattr(self, "_shutdown"):  # not when __init__ failed before the queues existed
            self._shutdown_workers()
