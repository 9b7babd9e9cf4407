"""DynamicLossScale: float16 loss scaling as graph nodes, PyTorch's GradScaler in a compiled step.

The session's training graph gets, around its forward, gradient and update nodes:

    scaled_loss = Mul(loss, scale)                       the seed of the gradient graph
    inverse = Div(1, scale)
    grad = MixedPrecisionScale(inverse, scaled_grad)     per parameter: unscaled, float32
    optimizer update with skip_non_finite=1              skips on an inf/NaN gradient
    LossScaleUpdate(grad_norm, scale, growth_tracker, skipped)

so the whole step (the decision to skip included) runs on the device, and a captured step stays
one CUDA Graph.  scale, growth_tracker and skipped are initializers of the graph, kept in the
session's DeviceState like the optimizer's moments; `state_dict()` holds them for checkpoints.
The defaults are GradScaler's: init_scale 2**16, growth_factor 2, backoff_factor 0.5,
growth_interval 2000.
"""
from __future__ import annotations

import numpy as np

from ..ops.compare import ONNX_CODE
from ..ops.schema import MS_DOMAIN
from ..optim.optimizer import check_real

SCALE, GROWTH_TRACKER, SKIPPED = "loss_scale.scale", "loss_scale.growth_tracker", "loss_scale.skipped"
FOUND_INF = "loss_scale.found_inf"
FLOAT32 = np.dtype(np.float32)


class DynamicLossScale:
    """The loss scale and its bookkeeping (host arrays, mirrored on the session's device)."""

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000):
        name = type(self).__name__
        self.growth_factor = check_real(name, "growth_factor", growth_factor, above=1)
        self.backoff_factor = check_real(name, "backoff_factor", backoff_factor, above=0, below=1)
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) or growth_interval < 1:
            raise ValueError(f"{name}: growth_interval must be an int >= 1, got {growth_interval!r}")
        self.growth_interval = growth_interval
        self.arrays = {SCALE: np.array(check_real(name, "init_scale", init_scale, above=0), FLOAT32),
                       GROWTH_TRACKER: np.zeros((), np.int64), SKIPPED: np.zeros((), np.int64)}

    # ------------------------------------------------------------------ graph
    def scale_loss(self, graph, loss):
        """Add `loss * scale` to `graph`; returns the scaled loss's name (the gradient seed)."""
        graph.add_initializer(SCALE, self.arrays[SCALE])
        return graph.add_node("Mul", [loss, SCALE], [graph.unique_name(f"{loss}.scaled")], name="loss_scale.mul")

    def unscale(self, graph, grads):
        """Add one MixedPrecisionScale per float32 gradient (parameter name -> value) that
        unscales it; returns parameter name -> unscaled gradient.  Where a gradient is the Cast
        of a low-precision gradient to float32 (the gradient of autocast's Cast of a master
        weight), MixedPrecisionScale reads the low-precision one and the Cast drops out of the plan."""
        one = graph.add_initializer(graph.unique_name("loss_scale.one"), np.ones((), FLOAT32))
        inverse = graph.add_node("Div", [one, SCALE], ["loss_scale.inverse"], name="loss_scale.inverse")
        producers, readers = graph.producers(), graph.consumers()
        unscaled = {}
        for param, grad in grads.items():
            cast = producers.get(grad)
            if cast is not None and cast.op_type == "Cast" and not readers.get(grad):
                grad = cast.inputs[0]
            unscaled[param] = graph.add_node("MixedPrecisionScale", [inverse, grad], [graph.unique_name(f"{grad}.unscaled")],
                                             {"to": ONNX_CODE[FLOAT32]}, MS_DOMAIN, name=f"loss_scale.unscale.{param}")
        return unscaled

    def add_update(self, graph, grad_norm):
        """Add the LossScaleUpdate reading the optimizer's `grad_norm`; returns its output."""
        for name in (GROWTH_TRACKER, SKIPPED):
            graph.add_initializer(name, self.arrays[name])
        graph.add_initializer(SCALE, self.arrays[SCALE])
        return graph.add_node("LossScaleUpdate", [grad_norm, SCALE, GROWTH_TRACKER, SKIPPED], [FOUND_INF],
                              {"growth_factor": self.growth_factor, "backoff_factor": self.backoff_factor,
                               "growth_interval": self.growth_interval}, MS_DOMAIN, name="loss_scale.update")

    # ------------------------------------------------------------------ state
    @property
    def scale(self):
        """The current loss scale (of the host arrays: pull the session's state first)."""
        return float(self.arrays[SCALE])

    @property
    def skipped(self):
        """Updates skipped so far for an inf/NaN gradient (host arrays, as `scale`)."""
        return int(self.arrays[SKIPPED])

    def state_dict(self):
        """Copies of scale, growth_tracker and skipped, by name."""
        return {name: array.copy() for name, array in self.arrays.items()}

    def check_state_dict(self, state):
        """Raise ValueError unless `state` holds every array of this scaler in its dtype and shape."""
        if set(state) != set(self.arrays):
            raise ValueError(f"loss scale state holds {sorted(state)}, expected {sorted(self.arrays)}")
        for name, array in state.items():
            if np.shape(array) != self.arrays[name].shape or np.asarray(array).dtype != self.arrays[name].dtype:
                raise ValueError(f"loss scale state {name!r} is {np.asarray(array).dtype}{np.shape(array)}, "
                                 f"expected {self.arrays[name].dtype}{self.arrays[name].shape}")

    def load_state_dict(self, state):
        """Restore the arrays in place (compiled plans keep reading the same arrays)."""
        self.check_state_dict(state)
        for name, array in state.items():
            np.copyto(self.arrays[name], array)
