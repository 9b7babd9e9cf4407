"""ShardSampler: one rank's share of a dataset's indices, epoch by epoch, as PyTorch's
DistributedSampler hands them out.

Every rank draws the same order of the whole dataset from (seed, epoch) alone, with no
communication, and takes every `size`-th index of it starting at its `rank`.  So that every rank
gets as many indices (hence as many batches, of the same sizes, and runs the same compiled
plans), the order is first made a multiple of `size` long:

- by default it is padded by wrapping around to its start: each rank gets ceil(n / size)
  indices and the first few samples of the order are seen twice that epoch;
- with `drop_last` its tail is cut: each rank gets floor(n / size) indices and the last few
  samples of the order are skipped that epoch (other ones the next epoch, when shuffled).

With size 1 the share is the plain order, so a one-process run and an N-rank run that batch the
shares alike see the same samples: rank r's k-th batch of B / size indices is exactly
`global_batch_k[r::size]`, global_batch_k being the k-th batch of B indices of the order (padded).
"""
from __future__ import annotations

import numpy as np


def _whole_number(owner, name, value, minimum=0):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def epoch_order(length, seed, epoch, shuffle=True):
    """The order of the whole dataset in `epoch`: a permutation drawn from (seed, epoch), or
    0..length-1 without shuffle.  Every rank computes the same one."""
    if not shuffle:
        return np.arange(length)
    return np.random.default_rng([seed, epoch]).permutation(length)


class ShardSampler:
    """The indices rank `rank` of `size` trains on, epoch by epoch (see the module docstring).

    length: the dataset's size.  shuffle: a new order every epoch, drawn from (seed, epoch);
    off, the dataset's own order.  seed: an integer >= 0, the same on every rank.  drop_last:
    cut the order to a multiple of size instead of padding it.  `set_epoch(e)` picks the epoch
    that the next iteration serves, as with PyTorch's sampler.
    """

    def __init__(self, length, *, rank=0, size=1, shuffle=True, seed=0, drop_last=False):
        self.length = _whole_number("ShardSampler", "length", length)
        self.size = _whole_number("ShardSampler", "size", size, 1)
        self.rank = _whole_number("ShardSampler", "rank", rank)
        if self.rank >= self.size:
            raise ValueError(f"ShardSampler: rank must be in [0, {self.size}) for size {self.size}, got {rank}")
        self.seed = _whole_number("ShardSampler", "seed", seed)
        self.shuffle, self.drop_last = bool(shuffle), bool(drop_last)
        self.epoch = 0

    def set_epoch(self, epoch):
        """Serve epoch `epoch`'s share from the next iteration on."""
        self.epoch = _whole_number("ShardSampler", "epoch", epoch)

    def __len__(self):
        """Indices per rank per epoch: the same on every rank."""
        return self.length // self.size if self.drop_last else -(-self.length // self.size)

    def indices(self):
        """This rank's indices of the current epoch, as an int64 array."""
        order = epoch_order(self.length, self.seed, self.epoch, self.shuffle)
        total = len(self) * self.size
        if total > self.length and self.length:
            order = np.resize(order, total)       # wraps around to the start, as often as needed
        return order[:total][self.rank::self.size]

    def __iter__(self):
        return iter(self.indices().tolist())
