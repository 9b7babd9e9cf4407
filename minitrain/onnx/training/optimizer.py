"""Optimizer: the optimizer_model.onnx that onnxruntime.training.artifacts writes, run by
minitrain's kernels as onnxruntime.training.api.Optimizer runs it; LinearLRScheduler.

That model is one com.microsoft node, AdamWOptimizer or SGDOptimizerV2, over the graph inputs
`learning_rate`, `step`, `params`, `gradients` and the moments (`first_order_moments`, and
`second_order_moments` for AdamW), the last ones sequences of tensors.  minitrain turns it into
a graph of the same node over one tensor per parameter and per sequence (ops/ort_optimizer.py
flattens the sequences), compiled like the Module's steps (compiled_step.py): the tensors are the
state's parameters, gradient buffers and moments, which the node updates in place on the
Module's device, and the step is captured there (a CUDA Graph after warm-up).  Only the learning
rate and the step count are fed per step, so a new learning rate needs no new capture.

The optimizer state is the state's group "group0": its step count, its initial learning rate
and each trainable parameter's moments ("momentum0", "momentum1"), zeros unless the checkpoint
held them.  As in ONNX Runtime, the learning rate starts at 1e-3 whatever the checkpoint says,
until set_learning_rate or a scheduler sets it.
"""
from __future__ import annotations

import os

import numpy as np

from ...errors import GraphError
from ...graph import Graph
from ...ops.schema import MS_DOMAIN
from .._backend import require_onnx
from ..ort_checkpoint_format import OptimizerGroupState
from .checkpoint_state import DEFAULT_LEARNING_RATE
from .compiled_step import CompiledStep
from .module import BUFFER_SUFFIX

GROUP = "group0"
# op type -> (graph inputs in order, the moments' names in the checkpoint)
ALGORITHMS = {
    "AdamWOptimizer": (("learning_rate", "step", "params", "gradients", "first_order_moments",
                        "second_order_moments"), ("momentum0", "momentum1")),
    "SGDOptimizerV2": (("learning_rate", "step", "params", "gradients", "first_order_moments"), ("momentum0",)),
}
SEQUENCES = ("params", "gradients", "first_order_moments", "second_order_moments")


class Optimizer:
    """optimizer_model.onnx (optimizer_uri) updating the trainable parameters of `module`."""

    def __init__(self, optimizer_uri, module):
        self._module, self._state = module, module._state
        self._uri = os.fspath(optimizer_uri)
        self._op_type, self._attrs, node_inputs = self._read_model()
        graph_inputs, self._moment_names = ALGORITHMS[self._op_type]
        params = module._trainable
        state = self._state
        group = state.optimizer_groups.setdefault(GROUP, OptimizerGroupState(0, DEFAULT_LEARNING_RATE, {}))
        if not group.states:
            group.states = {p: {k: state.provider.zeros(tuple(state.values[p].shape), state.values[p].dtype)
                                for k in self._moment_names} for p in params}
        self._check_moments(group)
        self._group = group
        self.learning_rate = DEFAULT_LEARNING_RATE
        graph = Graph(name="optimizer", opset_imports={MS_DOMAIN: 1})
        graph.add_input("learning_rate", np.float32, (1,))
        scalars = ["learning_rate"]
        if "step" in node_inputs:
            graph.add_input("step", np.int64, (1,))
            scalars.append("step")
        self._sequences = node_inputs[len(scalars):]
        sources = {"params": state.values, "gradients": state.grads}
        sources.update((sequence, {p: group.states[p][moment] for p in params})
                       for sequence, moment in zip((s for s in self._sequences if s not in sources), self._moment_names))
        tensors = {}
        for sequence in self._sequences:
            for p in params:
                name = _tensor_name(sequence, p)
                value = state.values[p]
                graph.add_input(name, value.dtype, tuple(value.shape))
                tensors[name] = sources[sequence][p]
        self._flag = graph.add_node(self._op_type, scalars + list(tensors), ["updated_flag"], dict(self._attrs),
                                    MS_DOMAIN, name=self._op_type)
        graph.outputs = [self._flag]
        self._update = CompiledStep(graph, [self._flag], state.provider, tensors, capture=module.capture)

    def _read_model(self):
        """(op type, attributes, the node's inputs) of the optimizer model, checked to be what
        generate_artifacts writes."""
        onnx = require_onnx()
        model = onnx.load(self._uri)
        nodes = [n for n in model.graph.node if n.domain == MS_DOMAIN and n.op_type in ALGORITHMS]
        if len(nodes) != 1 or len(model.graph.node) != 1:
            raise GraphError(f"Optimizer: {self._uri} must hold one AdamWOptimizer or SGDOptimizerV2 node "
                             f"(com.microsoft); it holds {[n.op_type for n in model.graph.node]}")
        node = nodes[0]
        expected = ALGORITHMS[node.op_type][0]
        actual = tuple(v.name for v in model.graph.input)
        if actual != expected:
            raise GraphError(f"Optimizer: {self._uri}: the inputs of a {node.op_type} model are {list(expected)}, "
                             f"this one has {list(actual)}")
        inputs = tuple(node.input)
        allowed = ("learning_rate", "step", *SEQUENCES) if node.op_type == "AdamWOptimizer" else \
            ("learning_rate", "params", "gradients")
        if inputs != allowed:
            raise GraphError(f"Optimizer: {self._uri}: node {node.op_type} reads {list(inputs)}; minitrain runs it "
                             f"on {list(allowed)} (no update_signal)")
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        return node.op_type, attrs, inputs

    def _check_moments(self, group):
        for p in self._module._trainable:
            moments = group.states.get(p)
            if moments is None or set(moments) != set(self._moment_names):
                raise ValueError(f"Optimizer: the checkpoint's optimizer state for {p!r} holds "
                                 f"{sorted(moments or {})}; {self._op_type} needs {list(self._moment_names)}")
            for name, value in moments.items():
                if tuple(value.shape) != tuple(self._state.values[p].shape):
                    raise ValueError(f"Optimizer: the checkpoint's {name} of {p!r} has shape {tuple(value.shape)}, "
                                     f"the parameter {tuple(self._state.values[p].shape)}")

    def step(self):
        """Update the trainable parameters with their gradients (and the moments), in place."""
        flag = self._update.run({"learning_rate": np.array([self.learning_rate], np.float32),
                               "step": np.array([self._group.step + 1], np.int64)})[self._flag]
        if bool(self._state.host(flag).reshape(-1)[0]):
            self._group.step += 1

    def set_learning_rate(self, learning_rate):
        """The learning rate of the next steps (float32, as ONNX Runtime keeps it)."""
        self.learning_rate = float(np.float32(learning_rate))

    def get_learning_rate(self):
        """The learning rate of the next step."""
        return self.learning_rate

    def set_initial_learning_rate(self, initial_lr):
        """The group's initial learning rate (saved in checkpoints), and the learning rate."""
        self._group.initial_learning_rate = float(np.float32(initial_lr))
        self.set_learning_rate(initial_lr)


def _tensor_name(sequence, param):
    """The name of `param`'s tensor of `sequence` in the optimizer's graph: the parameter and
    gradient buffer are named as in the training model, the moments after their sequence."""
    return {"params": param, "gradients": param + BUFFER_SUFFIX}.get(sequence, f"{sequence}/{param}")


class LinearLRScheduler:
    """Sets the optimizer's learning rate at each step(): linearly from 0 up to initial_lr over
    `warmup_step_count` steps, then linearly down to 0 at `total_step_count`, following the
    optimizer's step count.  Takes effect at once (the first learning rate is that of the
    current step).  ONNX Runtime 1.19.2's Python binding passes the two counts to its C++
    scheduler swapped; this one follows the documented meaning."""

    def __init__(self, optimizer, warmup_step_count, total_step_count, initial_lr):
        if int(warmup_step_count) < 0 or int(total_step_count) < int(warmup_step_count):
            raise ValueError(f"LinearLRScheduler: need 0 <= warmup_step_count <= total_step_count, got "
                             f"{warmup_step_count} and {total_step_count}")
        self._optimizer = optimizer
        self.warmup_step_count, self.total_step_count = int(warmup_step_count), int(total_step_count)
        optimizer.set_initial_learning_rate(initial_lr)
        self.step()

    def factor(self, step):
        """The multiplier of the initial learning rate at optimizer step `step` (float32)."""
        f32 = np.float32
        if step < self.warmup_step_count:
            return f32(step) / max(f32(1), f32(self.warmup_step_count))
        remaining, after_warmup = self.total_step_count - step, self.total_step_count - self.warmup_step_count
        return max(f32(0), f32(remaining) / max(f32(1), f32(after_warmup)))

    def step(self):
        """Set the learning rate for the optimizer's current step."""
        group = self._optimizer._group
        self._optimizer.set_learning_rate(np.float32(group.initial_learning_rate) * self.factor(group.step))
