"""minitrain's global random generator, used by ops that draw random numbers (Dropout).

`seed(s)` makes runs reproducible; `get_state()`/`set_state()` let a checkpoint save and
restore it, so that a resumed run draws the same masks as an uninterrupted one.
"""
import numpy as np

_generator = np.random.default_rng()


def seed(value):
    """Reseed the global generator."""
    global _generator
    _generator = np.random.default_rng(value)


def generator():
    """The global NumPy generator."""
    return _generator


def get_state():
    return _generator.bit_generator.state


def set_state(state):
    _generator.bit_generator.state = state
