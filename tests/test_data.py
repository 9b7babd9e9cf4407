"""DataLoader determinism and batching; the built-in digits and MNIST-1D datasets."""
import numpy as np
import pytest

from minitrain.data import ArrayDataset, DataLoader, Dataset, load_digits, load_mnist1d, make_mnist1d
from minitrain.data import mnist1d as mnist1d_module


def _epochs(loader, n):
    return [[tuple(np.copy(part) for part in batch) for batch in loader] for _ in range(n)]


def test_seeded_loaders_yield_identical_batches():
    ds = ArrayDataset(np.arange(50).reshape(50, 1), np.arange(50) % 3)
    a = _epochs(DataLoader(ds, 8, shuffle=True, seed=3), 3)
    b = _epochs(DataLoader(ds, 8, shuffle=True, seed=3), 3)
    for ea, eb in zip(a, b):
        for (xa, ya), (xb, yb) in zip(ea, eb):
            assert np.array_equal(xa, xb) and np.array_equal(ya, yb)
    first = np.concatenate([x[:, 0] for x, _ in a[0]])
    second = np.concatenate([x[:, 0] for x, _ in a[1]])
    assert not np.array_equal(first, second), "each epoch must draw a new order"
    other = np.concatenate([x[:, 0] for x, _ in _epochs(DataLoader(ds, 8, shuffle=True, seed=4), 1)[0]])
    assert not np.array_equal(first, other)


def test_every_sample_once_per_epoch_and_targets_follow_inputs():
    ds = ArrayDataset(np.arange(23), np.arange(23) * 10)
    batches = list(DataLoader(ds, 5, shuffle=True, seed=0))
    assert [len(x) for x, _ in batches] == [5, 5, 5, 5, 3]
    xs = np.concatenate([x for x, _ in batches])
    assert sorted(xs.tolist()) == list(range(23))
    assert all(np.array_equal(y, x * 10) for x, y in batches)


def test_drop_last_and_len():
    ds = ArrayDataset(np.arange(23))
    assert len(DataLoader(ds, 5)) == 5
    loader = DataLoader(ds, 5, drop_last=True)
    assert len(loader) == 4
    batches = list(loader)
    assert [len(b) for b in batches] == [5, 5, 5, 5]
    assert np.array_equal(np.concatenate(batches), np.arange(20)), "no shuffle keeps the order"


def test_state_dict_replays_the_next_epoch():
    ds = ArrayDataset(np.arange(40))
    loader = DataLoader(ds, 7, shuffle=True, seed=11)
    list(loader)
    state = loader.state_dict()
    expected = [b.copy() for b in loader]
    other = DataLoader(ds, 7, shuffle=True, seed=999)
    other.load_state_dict(state)
    assert all(np.array_equal(a, b) for a, b in zip(expected, other))


def test_item_by_item_dataset_is_stacked():
    class Squares(Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            return np.array([i], dtype=np.float32), i * i

    x, y = next(iter(DataLoader(Squares(), 4)))
    assert x.shape == (4, 1) and y.tolist() == [0, 1, 4, 9]


def test_bad_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(ArrayDataset(np.arange(3)), 0)
    with pytest.raises(ValueError, match="different lengths"):
        ArrayDataset(np.arange(3), np.arange(4))


def test_digits_fixed_split():
    d = load_digits()
    assert d.x_train.shape == (1438, 1, 8, 8) and d.x_test.shape == (359, 1, 8, 8)
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int64
    assert 0 <= d.x_train.min() and d.x_train.max() == 1.0
    assert set(np.unique(d.y_test)) == set(range(10))
    counts = np.bincount(d.y_test)
    assert counts.min() >= 34 and counts.max() <= 37, "the test split is class-stratified"
    again = load_digits(np.float64)
    assert np.array_equal(again.x_test.astype(np.float32), d.x_test)


def test_mnist1d_recipe_shapes_and_determinism(tmp_path, monkeypatch):
    monkeypatch.setenv("MINITRAIN_CACHE_DIR", str(tmp_path))
    a = make_mnist1d(seed=5)
    b = make_mnist1d(seed=5)
    assert a.x_train.shape == (4000, 40) and a.x_test.shape == (1000, 40)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert not np.array_equal(make_mnist1d(seed=6).x_train, a.x_train)
    xs = np.concatenate([a.x_train, a.x_test])
    assert abs(xs.mean()) < 1e-9 and abs(xs.std() - 1) < 1e-9
    assert np.bincount(np.concatenate([a.y_train, a.y_test])).tolist() == [500] * 10
    # classes must differ in their mean signal (templates survive the noise)
    means = np.stack([a.x_train[a.y_train == c].mean(0) for c in range(10)])
    assert np.min([np.abs(means[i] - means[j]).max() for i in range(10) for j in range(i)]) > 0.1


def test_mnist1d_is_cached_on_disk_and_survives_a_bad_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MINITRAIN_CACHE_DIR", str(tmp_path))
    mnist1d_module._cached.cache_clear()
    split = load_mnist1d(seed=7)
    assert split.x_train.shape == (4000, 1, 40) and split.x_train.dtype == np.float32
    path = tmp_path / "mnist1d-v1-seed7.npz"
    assert path.exists()
    path.write_bytes(path.read_bytes()[:100])          # truncated: regenerated, not an error
    mnist1d_module._cached.cache_clear()
    again = load_mnist1d(seed=7)
    assert np.array_equal(again.x_test, split.x_test)
    mnist1d_module._cached.cache_clear()
