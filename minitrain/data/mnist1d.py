"""MNIST-1D, generated procedurally (Greydanus, "Scaling down deep learning", 2020).

Each class is a hand-drawn 1-D template of 12 points.  A sample is made by the paper's recipe:
pad the template with 36..60 zeros, stretch it to 72 points, scale its amplitude by
1 +- 0.2, roll it by 0..47 steps, fill the padding with smoothed Gaussian noise (sigma 0.25,
filtered with a Gaussian of width 2), add white noise (sigma 0.02), shear it by a random linear
ramp (+- 0.375) and resample it to 40 points.  5,000 samples (500 per class) are shuffled and
standardised as a whole; the first 4,000 are the train set, the last 1,000 the test set.

The set depends only on the seed.  It takes a fraction of a second to make and is cached in
memory and on disk (MINITRAIN_CACHE_DIR, default ~/.cache/minitrain).
"""
from __future__ import annotations

import functools
import os
import tempfile
import zipfile

import numpy as np
from scipy.ndimage import gaussian_filter1d

from .digits import Split

NUM_CLASSES = 10
SAMPLES_PER_CLASS = 500
TRAIN_SIZE = 4000
LENGTH = 40
TEMPLATE_LENGTH = 12
PADDING = (36, 60)
SCALE = 0.4
MAX_SHIFT = 48
CORRELATED_NOISE = 0.25
WHITE_NOISE = 0.02
SHEAR = 0.75
RECIPE_VERSION = 1

# One row per digit: the rough 1-D outline of its shape, as the paper draws them.
_OUTLINES = np.array([
    [5, 6, 6.5, 6.75, 7, 7, 7, 7, 6.75, 6.5, 6, 5],
    [5, 3, 3, 3.4, 3.8, 4.2, 4.6, 5, 5.4, 5.8, 5, 5],
    [5, 6, 6.5, 6.5, 6, 5.25, 4.75, 4, 3.5, 3.5, 4, 5],
    [5, 6, 6.5, 6.5, 6, 5, 5, 6, 6.5, 6.5, 6, 5],
    [5, 4.4, 3.8, 3.2, 2.6, 2.6, 5, 5, 5, 5, 5, 5],
    [5, 3, 3, 3, 3, 5, 6, 6.5, 6.5, 6, 4.5, 5],
    [5, 4, 3.5, 3.25, 3, 3, 3, 3, 3.25, 3.5, 4, 5],
    [5, 7, 7, 6.6, 6.2, 5.8, 5.4, 5, 4.6, 4.2, 5, 5],
    [5, 4, 3.5, 3.5, 4, 5, 5, 4, 3.5, 3.5, 4, 5],
    [5, 4, 3.5, 3.5, 4, 5, 5, 5, 5, 4.7, 4.3, 5],
])


def templates():
    """The ten templates: each outline standardised, shifted to start at 0, divided by 6."""
    t = _OUTLINES - _OUTLINES.mean(axis=1, keepdims=True)
    t /= t.std(axis=1, keepdims=True)
    return (t - t[:, :1]) / 6.0


def _resample(x, n):
    """Linear resampling of a 1-D signal to n points spanning the same interval."""
    return np.interp(np.linspace(0.0, 1.0, n), np.linspace(0.0, 1.0, len(x)), x)


def _sample(template, rng):
    """One noisy, stretched, shifted, sheared copy of a template (the paper's recipe)."""
    pad = int(rng.integers(PADDING[0], PADDING[1] + 1))
    # a tiny offset keeps the template's own zero crossings apart from the padding
    x = np.concatenate([template + 1e-8, np.zeros(pad)])
    width = TEMPLATE_LENGTH + PADDING[1]
    x = _resample(x, width)
    x *= 1.0 + SCALE * (rng.random() - 0.5)
    x = np.roll(x, int(rng.integers(MAX_SHIFT)))
    background = gaussian_filter1d(CORRELATED_NOISE * rng.standard_normal(width), 2.0, mode="reflect")
    x = np.where(x != 0, x, background)
    x = x + WHITE_NOISE * rng.standard_normal(width)
    x = x - SHEAR * (rng.random() - 0.5) * np.linspace(-0.5, 0.5, width)
    return _resample(x, LENGTH)


def make_mnist1d(seed=42):
    """Generate the set: (x_train (4000, 40), y_train, x_test (1000, 40), y_test), float64
    signals standardised to mean 0 and std 1, int64 labels."""
    rng = np.random.default_rng(seed)
    shapes = templates()
    labels = np.repeat(np.arange(NUM_CLASSES), SAMPLES_PER_CLASS)
    xs = np.stack([_sample(shapes[label], rng) for label in labels])
    order = rng.permutation(len(labels))
    xs, labels = xs[order], labels[order]
    xs = (xs - xs.mean()) / xs.std()
    return Split(xs[:TRAIN_SIZE], labels[:TRAIN_SIZE], xs[TRAIN_SIZE:], labels[TRAIN_SIZE:])


def _cache_path(seed):
    root = os.environ.get("MINITRAIN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "minitrain")
    return os.path.join(root, f"mnist1d-v{RECIPE_VERSION}-seed{seed}.npz")


def _read_cache(path):
    try:
        with np.load(path) as f:
            split = Split(*(f[k] for k in Split._fields))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    ok = split.x_train.shape == (TRAIN_SIZE, LENGTH) and len(split.y_test) == len(split.x_test)
    return split if ok else None


def _write_cache(path, split):
    """Best effort, atomic: a temp file in the same folder, then os.replace."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **split._asdict())
        os.replace(tmp, path)
    except OSError:
        pass


@functools.lru_cache(maxsize=4)
def _cached(seed):
    path = _cache_path(seed)
    split = _read_cache(path)
    if split is None:
        split = make_mnist1d(seed)
        _write_cache(path, split)
    return split


def load_mnist1d(seed=42, dtype=np.float32):
    """MNIST-1D as (N, 1, 40) signals of `dtype` and int64 labels (train 4,000, test 1,000)."""
    split = _cached(int(seed))
    return Split(split.x_train[:, None, :].astype(dtype), split.y_train.astype(np.int64),
                 split.x_test[:, None, :].astype(dtype), split.y_test.astype(np.int64))
