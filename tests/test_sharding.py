"""ShardSampler and DataLoader.shard: the data side of a data-parallel run, checked without MPI
(each rank's share built with its rank and size given explicitly)."""
import numpy as np
import pytest

from minitrain.data import ArrayDataset, DataLoader, ShardSampler


def shares(length, size, epoch=0, **kwargs):
    samplers = [ShardSampler(length, rank=r, size=size, **kwargs) for r in range(size)]
    for s in samplers:
        s.set_epoch(epoch)
    return [s.indices() for s in samplers]


@pytest.mark.parametrize("length,size", [(23, 1), (23, 2), (23, 4), (24, 4), (5, 8), (1, 3)])
def test_padding_covers_every_sample_and_repeats_only_the_wrap(length, size):
    parts = shares(length, size, seed=7)
    assert len({len(p) for p in parts}) == 1 and len(parts[0]) == -(-length // size)
    seen = np.concatenate(parts)
    assert sorted(set(seen.tolist())) == list(range(length)), "every sample once per epoch over the ranks"
    order = ShardSampler(length, seed=7).indices()
    padded = np.resize(order, len(seen))
    assert np.array_equal(np.sort(seen), np.sort(padded)), "the only repeats are the order's first samples"


@pytest.mark.parametrize("length,size", [(23, 2), (23, 4), (24, 4), (5, 8)])
def test_drop_last_gives_equal_shares_without_repeats(length, size):
    parts = shares(length, size, seed=7, drop_last=True)
    assert {len(p) for p in parts} == {length // size}
    seen = np.concatenate(parts)
    assert len(set(seen.tolist())) == len(seen) == length - length % size


def test_order_depends_on_seed_and_epoch_only():
    a, b = ShardSampler(50, rank=1, size=3, seed=4), ShardSampler(50, rank=1, size=3, seed=4)
    b.indices()                                # drawing does not move the order on
    assert np.array_equal(a.indices(), b.indices())
    first = a.indices()
    a.set_epoch(1)
    assert not np.array_equal(first, a.indices()), "each epoch draws a new order"
    a.set_epoch(0)
    assert np.array_equal(first, a.indices())
    assert not np.array_equal(first, ShardSampler(50, rank=1, size=3, seed=5).indices())
    assert np.array_equal(ShardSampler(10, rank=1, size=2, shuffle=False).indices(), [1, 3, 5, 7, 9])


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="rank must be in"):
        ShardSampler(10, rank=2, size=2)
    with pytest.raises(ValueError, match="size must be an integer >= 1"):
        ShardSampler(10, size=0)
    with pytest.raises(ValueError, match="seed"):
        ShardSampler(10, seed=-1)
    with pytest.raises(ValueError, match="epoch"):
        ShardSampler(10).set_epoch(1.5)
    with pytest.raises(ValueError, match="batch_size 6 .* 4 ranks"):
        DataLoader(ArrayDataset(np.arange(10)), 6).shard(0, 4)


def epoch_batches(loader):
    return [b.copy() for b in loader]


@pytest.mark.parametrize("length,drop_last", [(40, False), (37, False), (37, True)])
def test_sharded_loaders_split_the_global_batches(length, drop_last):
    """Rank r's k-th batch is the k-th global batch's [r::size]; every rank has as many batches,
    of the same sizes, and the ranks' batches together are one process's batches."""
    data = ArrayDataset(np.arange(length))
    single = DataLoader(data, 8, shuffle=True, seed=3, drop_last=drop_last)
    ranks = [DataLoader(data, 8, shuffle=True, seed=3, drop_last=drop_last) for _ in range(4)]
    for rank, loader in enumerate(ranks):
        loader.shard(rank, 4)
    assert {len(loader) for loader in ranks} == {len(single)}
    for _ in range(2):                          # two epochs: each draws its order again
        whole = epoch_batches(single)
        parts = [epoch_batches(loader) for loader in ranks]
        assert len({tuple(len(b) for b in p) for p in parts}) == 1, "same batch sizes on every rank"
        for k, batch in enumerate(whole):
            joined = np.empty(sum(len(p[k]) for p in parts), batch.dtype)
            for rank, p in enumerate(parts):
                joined[rank::4] = p[k]
            if len(joined) == len(batch):
                assert np.array_equal(joined, batch)
            else:                               # the padded last batch: the wrap comes from the order's start
                assert not drop_last and np.array_equal(joined[:len(batch)], batch)


def test_a_sharded_loader_resumes_from_a_one_process_state():
    data = ArrayDataset(np.arange(24))
    single = DataLoader(data, 6, shuffle=True, seed=None)
    epoch_batches(single)
    state = single.state_dict()
    expected = epoch_batches(single)
    rank1 = DataLoader(data, 6, shuffle=True, seed=0)
    rank1.shard(1, 2)
    rank1.load_state_dict(state)
    assert all(np.array_equal(part, whole[1::2]) for part, whole in zip(epoch_batches(rank1), expected))
    with pytest.raises(ValueError, match="'seed' and 'epoch'"):
        rank1.load_state_dict({"bit_generator": "PCG64"})
