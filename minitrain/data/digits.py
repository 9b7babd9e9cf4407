"""scikit-learn's 8x8 handwritten digits, shipped inside the package (no network, no sklearn).

1,797 grey-level images (values 0..16) of the digits 0-9, from the UCI optical recognition of
handwritten digits set as scikit-learn distributes it.  The split is fixed: a seeded,
class-stratified 20% (359 images) is the test set, the other 1,438 images are the train set.
"""
from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

_PATH = os.path.join(os.path.dirname(__file__), "digits.npz")


class Split(NamedTuple):
    """A train/test split of a labelled dataset."""
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_digits(dtype=np.float32):
    """The digits as (N, 1, 8, 8) images scaled to [0, 1] and int64 labels."""
    with np.load(_PATH) as f:
        parts = {k: f[k] for k in ("x_train", "y_train", "x_test", "y_test")}

    def images(x):
        return (x.astype(dtype) / dtype(16))[:, None, :, :]
    return Split(images(parts["x_train"]), parts["y_train"].astype(np.int64),
                 images(parts["x_test"]), parts["y_test"].astype(np.int64))
