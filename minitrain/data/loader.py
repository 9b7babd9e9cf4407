"""Datasets and a seeded DataLoader.

A dataset is anything with `__len__` and `__getitem__`; one that also has `batch(indices)`
(ArrayDataset does) is sliced a whole batch at a time with NumPy fancy indexing instead of item
by item.  The loader draws each epoch's order from its seed and the epoch's number (a
ShardSampler, data/sharding.py), so two loaders built with the same seed yield the same batches,
on one process or sharded over the ranks of a data-parallel run, and `state_dict()` lets a
checkpoint resume the exact order.
"""
from __future__ import annotations

import numpy as np

from .sharding import ShardSampler


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

    shuffle: a new order every epoch, drawn from (seed, epoch) (data/sharding.py; seed None:
    one drawn from fresh entropy, kept in `state_dict()`); drop_last: skip the final incomplete
    batch.  Each batch is a tuple of arrays (or one array), as the dataset's `batch` returns it.

    In a data-parallel run `fit` calls `shard(rank, size)`: `batch_size` stays the global batch,
    and each rank then serves its strided share of every global batch, batch_size // size
    samples, so that N ranks together train on the batches one process would.
    """

    def __init__(self, dataset, batch_size=32, *, shuffle=False, drop_last=False, seed=None):
        if int(batch_size) < 1:
            raise ValueError(f"DataLoader: batch_size must be >= 1, got {batch_size!r}")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.epoch = 0
        self.sampler = self._sampler(0, 1, np.random.SeedSequence().entropy if seed is None else seed)

    def _sampler(self, rank, size, seed):
        return ShardSampler(len(self.dataset), rank=rank, size=size, shuffle=self.shuffle, seed=seed,
                            drop_last=self.drop_last)

    def shard(self, rank, size):
        """Serve rank `rank`'s share (of `size` ranks) of every batch from now on; ValueError
        when the global batch_size does not split evenly over the ranks."""
        if self.batch_size % size:
            raise ValueError(f"DataLoader: batch_size {self.batch_size} is the global batch of a data-parallel run "
                             f"and must split evenly over its {size} ranks")
        self.sampler = self._sampler(rank, size, self.sampler.seed)

    @property
    def rank_batch_size(self):
        """Samples per batch on this rank: batch_size over the ranks the loader is sharded on."""
        return self.batch_size // self.sampler.size

    def __len__(self):
        share, batch = len(self.sampler), self.rank_batch_size
        return share // batch if self.drop_last else -(-share // batch)

    def __iter__(self):
        self.sampler.set_epoch(self.epoch)
        self.epoch += 1
        indices = self.sampler.indices()
        batch = self.rank_batch_size
        stop = len(indices) - len(indices) % batch if self.drop_last else len(indices)
        for start in range(0, stop, batch):
            yield self.dataset.batch(indices[start:start + batch])

    def state_dict(self):
        """The seed and the next epoch: restoring them replays the same epoch orders, on any
        number of ranks."""
        return {"seed": self.sampler.seed, "epoch": self.epoch}

    def load_state_dict(self, state):
        if not (isinstance(state, dict) and set(state) == {"seed", "epoch"}):
            raise ValueError(f"DataLoader.load_state_dict: expected a dict with 'seed' and 'epoch', got {state!r}")
        self.sampler = self._sampler(self.sampler.rank, self.sampler.size, state["seed"])
        self.sampler.set_epoch(state["epoch"])
        self.epoch = self.sampler.epoch
