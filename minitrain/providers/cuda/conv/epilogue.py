"""FusedConv's epilogue in the conv search: Y = act(conv(X, W) + B).

A forward key may carry an activation (ConvKey.activation: the code of cuda/activation.cuh's
`activate` and its two parameters, alpha and beta).  An algorithm whose kernel applies it in its own epilogue says
`fuses_activation`; every other one is wrapped by `with_activation` to run without the bias and
then add the bias and apply the activation in one pass (cuda/fused.cu's bias_activation), so
the search times both ways to the same result.
"""
from __future__ import annotations

from ..compiler import Kernel

BIAS_ACTIVATION = Kernel("fused", "bias_activation", "PPqqqqqqTiTT")


def activation_args(key):
    """The kernel arguments (code, alpha, beta) of a key's activation for a kernel that applies
    it in its epilogue (activation.cuh's activate_or_keep): code -1 where there is none."""
    return key.activation if key.activation is not None else (-1, 0.0, 0.0)


def bias_activation(provider, y, bias, code, alpha, beta):
    """y (N, C, ...) = act(y + bias[channel]) in place (no bias: act(y))."""
    channels = y.shape[1]
    plane = y.size // (y.shape[0] * channels)
    BIAS_ACTIVATION.launch_elements(provider, y.dtype, y.size, y, 0 if bias is None else bias, y.size, plane, channels,
                                    1, 1, 0, 1.0, code, alpha, beta)


class WithActivation:
    """A forward algorithm without the fused epilogue, followed by bias_activation."""

    def __init__(self, algorithm):
        self.algorithm = algorithm
        self.name, self.deterministic = algorithm.name, algorithm.deterministic
        self.family = getattr(algorithm, "family", None)

    def supports(self, key):
        return self.algorithm.supports(key)

    def workspace_bytes(self, key):
        return self.algorithm.workspace_bytes(key)

    def heuristic_rank(self, key):
        return self.algorithm.heuristic_rank(key)

    def run(self, provider, key, buffers):
        source, w, bias, out = buffers
        self.algorithm.run(provider, key, (source, w, None, out))
        bias_activation(provider, out, bias, *key.activation)


class FamilyWithActivation:
    """A family of the search whose algorithms are each wrapped by with_activation."""

    def __init__(self, family):
        self.family = family

    def for_key(self, provider, key):
        return [with_activation(algorithm) for algorithm in self.family.for_key(provider, key)]


def with_activation(entry):
    """The algorithm-list entry for keys with an activation: the entry itself where it fuses
    the activation, else wrapped."""
    if hasattr(entry, "for_key"):
        return FamilyWithActivation(entry)
    return entry if getattr(entry, "fuses_activation", False) else WithActivation(entry)
