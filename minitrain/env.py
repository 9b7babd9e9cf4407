"""Process-wide settings: counts read from the environment at import, or given to a setter."""
import os

import numpy as np


def count_from_env(name, default):
    """The count (an int >= 1) in environment variable `name`, or `default` when it is unset or
    empty; anything else is a ValueError naming the variable."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{name} must be a count >= 1, got {text!r}")
    return int(text)


def require_count(who, n):
    """n as an int when it is an int >= 1 (not a bool), else a ValueError naming `who`."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{who}: expected an int >= 1, got {n!r}")
    return int(n)
