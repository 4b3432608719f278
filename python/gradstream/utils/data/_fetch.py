"""Turning indices (map-style) or the next items of a stream (iterable) into one batch; used by
the main process and by each worker alike."""

from __future__ import annotations


def fetch_map(dataset, index, auto_collation: bool, collate_fn):
    """The batch for `index`: a list of indices when auto-collating, else one index."""
    if not auto_collation:
        return collate_fn(dataset[index])
    getitems = getattr(dataset, "__getitems__", None)
    samples = getitems(index) if callable(getitems) else [dataset[i] for i in index]
    return collate_fn(samples)


class IterableFetcher:
    """Draws batches from one pass over an iterable dataset; `fetch` raises StopIteration
    when the pass is over (or when only a short batch is left and `drop_last`)."""

    def __init__(self, dataset, auto_collation: bool, collate_fn, batch_size, drop_last: bool):
        self.iterator = iter(dataset)
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.ended = False

    def fetch(self):
        if self.ended:
            raise StopIteration
        if not self.auto_collation:
            return self.collate_fn(next(self.iterator))
        samples = []
        for item in self.iterator:
            samples.append(item)
            if len(samples) == self.batch_size:
                break
        else:
            self.ended = True
        if not samples or (self.drop_last and len(samples) < self.batch_size):
            self.ended = True
            raise StopIteration
        return self.collate_fn(samples)
