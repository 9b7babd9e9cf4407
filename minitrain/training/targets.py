"""Targets fed to a TrainingSession, converted to the dtype its loss expects."""
import numpy as np

from ..errors import DTypeError


def as_targets(targets, dtype):
    """`targets` as `dtype`.  Class labels (an integer dtype) given as floats must be whole
    numbers: a cast would truncate 2.7 to class 2 without a word."""
    targets = np.asarray(targets)
    dtype = np.dtype(dtype)
    if dtype.kind in "iu" and targets.dtype.kind == "f":
        whole = np.isfinite(targets) & (targets == np.round(targets))
        if not whole.all():
            bad = float(targets[~whole].reshape(-1)[0])
            raise DTypeError(f"TrainingSession: targets are class labels ({dtype}) but hold {bad!r}, "
                             f"which is not a whole number")
    return targets.astype(dtype, copy=False)
