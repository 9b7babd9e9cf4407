"""Default initialisations, as PyTorch's layers do them, drawn from minitrain's global
generator (minitrain.random.seed makes them reproducible)."""
import math

import numpy as np

from .. import random as mt_random


def uniform(shape, bound, dtype=np.float32):
    """U(-bound, bound) samples of `shape`."""
    return mt_random.generator().uniform(-bound, bound, shape).astype(dtype)


def kaiming_uniform(shape, fan_in, a=math.sqrt(5), dtype=np.float32):
    """He uniform with negative slope `a`: bound = sqrt(6 / ((1 + a^2) fan_in)); PyTorch's
    default a = sqrt(5) gives 1 / sqrt(fan_in) (the weight init of Linear and Conv layers)."""
    gain = math.sqrt(2.0 / (1 + a * a))
    return uniform(shape, gain * math.sqrt(3.0 / fan_in), dtype)


def glorot_uniform(shape, fan_in, fan_out, dtype=np.float32):
    """Glorot/Xavier uniform: bound = sqrt(6 / (fan_in + fan_out))."""
    return uniform(shape, math.sqrt(6.0 / (fan_in + fan_out)), dtype)


def bias_uniform(shape, fan_in, dtype=np.float32):
    """PyTorch's default bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    return uniform(shape, 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0, dtype)
