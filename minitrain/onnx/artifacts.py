"""Run the training graph that onnxruntime.training.artifacts.generate_artifacts writes.

That graph (training_model.onnx) takes the model's inputs, its labels, every trainable
parameter, one gradient accumulation buffer per parameter (`<param>_grad.accumulation.buffer`)
and the bool `lazy_reset_grad`; it returns the loss, and its InPlaceAccumulatorV2 nodes write
each parameter's gradient into its buffer in place (overwriting it when `lazy_reset_grad` is
true, adding to it otherwise).  ArtifactModule runs it with minitrain's kernels and keeps
those buffers, as ONNX Runtime's `onnxruntime.training.api.Module` does: call it on a batch
for the loss, read `grads`, call `lazy_reset_grad()` before the next accumulation.

ONNX Runtime's checkpoint file is its own flatbuffer format: the parameters come from an
ONNX model that holds them as initializers (the model the artifacts were generated from), or
as a dict.
"""
from __future__ import annotations

import numpy as np

from ..executor import Executor
from ..scheduler import schedule
from .importer import load

BUFFER_SUFFIX = "_grad.accumulation.buffer"
RESET_INPUT = "lazy_reset_grad"


class ArtifactModule:
    """training_model.onnx (a path or ModelProto) with `parameters`: a dict name -> array, or
    an ONNX model (path or ModelProto) whose initializers hold them."""

    def __init__(self, training_model, parameters):
        self.graph = load(training_model)
        names = self.graph.input_names
        self.param_names = [n[:-len(BUFFER_SUFFIX)] for n in names if n.endswith(BUFFER_SUFFIX)]
        if RESET_INPUT not in names or not self.param_names:
            raise ValueError(f"ArtifactModule: graph {self.graph.name!r} is not an onnxruntime-training "
                             f"training model (no {RESET_INPUT!r} input or no '*{BUFFER_SUFFIX}' inputs); "
                             f"its inputs are {names}")
        source = parameters if isinstance(parameters, dict) else load(parameters).initializers
        missing = [p for p in self.param_names if p not in source]
        if missing:
            raise ValueError(f"ArtifactModule: no value for the trainable parameter(s) {missing}")
        types = {v.name: v.dtype for v in self.graph.inputs}
        self.parameters = {p: np.array(source[p], dtype=types[p]) for p in self.param_names}
        self.grads = {p: np.zeros_like(a) for p, a in self.parameters.items()}
        state = set(self.param_names) | {p + BUFFER_SUFFIX for p in self.param_names} | {RESET_INPUT}
        self.input_names = [n for n in names if n not in state]
        self.loss_name = self.graph.outputs[0]
        self._accumulated = self._expose_accumulated()
        self._executor = Executor(schedule(self.graph, [self.loss_name, *self._accumulated.values()]))
        self._reset = True

    def _expose_accumulated(self):
        """Give each accumulator its optional `accumulated` output (the buffer after the
        update), so that the gradients are fetched rather than read back from the fed arrays."""
        buffers = {p + BUFFER_SUFFIX: p for p in self.param_names}
        outputs = {}
        for node in self.graph.nodes:
            if node.op_type == "InPlaceAccumulatorV2" and node.inputs[0] in buffers:
                if len(node.outputs) < 2 or not node.outputs[1]:
                    node.outputs = [node.outputs[0], f"{node.inputs[0]}.accumulated"]
                outputs[buffers[node.inputs[0]]] = node.outputs[1]
        missing = sorted(set(self.param_names) - set(outputs))
        if missing:
            raise ValueError(f"ArtifactModule: no InPlaceAccumulatorV2 node writes the gradient of {missing}")
        return outputs

    def lazy_reset_grad(self):
        """The next call overwrites the gradients instead of adding to them."""
        self._reset = True

    def __call__(self, *inputs):
        """Forward and backward on one batch (the model's inputs, then the labels, in the
        graph's order); adds the gradients into `grads` (or overwrites them after a reset) and
        returns the loss."""
        if len(inputs) != len(self.input_names):
            raise TypeError(f"ArtifactModule takes {len(self.input_names)} inputs {self.input_names}, "
                            f"got {len(inputs)}")
        feeds = dict(zip(self.input_names, inputs))
        feeds.update(self.parameters)
        feeds.update((p + BUFFER_SUFFIX, g) for p, g in self.grads.items())
        feeds[RESET_INPUT] = np.array([self._reset])
        results = self._executor.run(feeds)
        for param, name in self._accumulated.items():
            if results[name] is not self.grads[param]:
                np.copyto(self.grads[param], results[name])
        self._reset = False
        return results[self.loss_name]
