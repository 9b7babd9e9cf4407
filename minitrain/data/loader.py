"""Datasets and a seeded DataLoader.

A dataset is anything with `__len__` and `__getitem__`; one that also has `batch(indices)`
(ArrayDataset does) is sliced a whole batch at a time with NumPy fancy indexing instead of item
by item.  The loader draws each epoch's order from its own NumPy generator, so two loaders
built with the same seed yield the same batches, and `state_dict()` lets a checkpoint resume
the exact order.
"""
from __future__ import annotations

import numpy as np


class Dataset:
    """Base class: subclasses define `__len__` and `__getitem__(i)` returning a tuple of arrays
    (or one array).  Override `batch(indices)` to serve a batch faster than item by item."""

    def __len__(self):
        raise NotImplementedError

    def __getitem__(self, index):
        raise NotImplementedError

    def batch(self, indices):
        """The items at `indices`, stacked field by field."""
        items = [self[int(i)] for i in indices]
        if not isinstance(items[0], tuple):
            return np.stack(items)
        return tuple(np.stack(field) for field in zip(*items))


class ArrayDataset(Dataset):
    """Samples are the rows of equally long arrays (inputs, targets, ...)."""

    def __init__(self, *arrays):
        if not arrays:
            raise ValueError("ArrayDataset needs at least one array")
        lengths = {len(a) for a in arrays}
        if len(lengths) != 1:
            raise ValueError(f"ArrayDataset: arrays have different lengths {[len(a) for a in arrays]}")
        self.arrays = tuple(np.asarray(a) for a in arrays)

    def __len__(self):
        return len(self.arrays[0])

    def __getitem__(self, index):
        items = tuple(a[index] for a in self.arrays)
        return items if len(items) > 1 else items[0]

    def batch(self, indices):
        items = tuple(a[indices] for a in self.arrays)
        return items if len(items) > 1 else items[0]


class DataLoader:
    """Iterate over a dataset in batches.

    shuffle: draw a new order every epoch from a generator seeded with `seed` (None: fresh
    entropy, not reproducible); drop_last: skip the final incomplete batch.  Each batch is a
    tuple of arrays (or one array), as the dataset's `batch` returns it.
    """

    def __init__(self, dataset, batch_size=32, *, shuffle=False, drop_last=False, seed=None):
        if int(batch_size) < 1:
            raise ValueError(f"DataLoader: batch_size must be >= 1, got {batch_size!r}")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.generator = np.random.default_rng(seed)

    def __len__(self):
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        n = len(self.dataset)
        order = self.generator.permutation(n) if self.shuffle else np.arange(n)
        stop = n - n % self.batch_size if self.drop_last else n
        for start in range(0, stop, self.batch_size):
            yield self.dataset.batch(order[start:start + self.batch_size])

    def state_dict(self):
        """The generator's state: restoring it replays the same epoch orders."""
        return self.generator.bit_generator.state

    def load_state_dict(self, state):
        self.generator.bit_generator.state = state
