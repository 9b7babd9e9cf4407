"""GraphModule: a Module whose forward replays a Graph (one imported from ONNX, say).

Its initializers become the module's state under their own names: the trainable ones
Parameters, the rest Buffers; so a graph with no Python model behind it trains in a
TrainingSession like any nn model.  By default the trainable initializers are the
floating-point ones that some node differentiates (see trainable_initializers): integer
initializers, BatchNormalization's running statistics and the constant operands of Clip or
Reshape stay Buffers.

Shape subgraphs (view, flatten, chunk as PyTorch exports them) are folded into constants as the
graph is replayed (shape_folding.py): the recorded graph holds no Shape arithmetic, but for the
values that only the run can know (symbolic dims where a constant cannot stand for them), whose
subgraph nodes are recorded to run on the host.

A BatchNormalization in training mode (an ONNX model exported in training mode) keeps its
meaning in a training graph, batch statistics, and its running statistics replace the
initializers they were computed from after each training run, as nn.BatchNorm's do; in an
inference graph it normalises with the running statistics.
"""
from __future__ import annotations

import numpy as np

from ..bfloat16 import is_float
from ..inference import topological_order
from ..ops.gradients import get_gradient_builder
from ..ops.normalization import BN_OUTPUTS, RUNNING_OUTPUTS, is_training
from ..shape_folding import ShapeFolder
from .module import Buffer, Module, Parameter


def trainable_initializers(graph):
    """The floating-point initializers that reach a differentiable input of some node (one its
    gradient builder, at the graph's opset, gives a gradient), in the graph's order."""
    differentiated = set()
    for node in graph.nodes:
        builder = get_gradient_builder(node.op_type, node.domain, graph.opset(node.domain))
        if builder is None:
            continue
        indices = range(len(node.inputs)) if builder.differentiable is None else builder.differentiable
        differentiated.update(node.inputs[i] for i in indices if i < len(node.inputs))
    return [n for n, a in graph.initializers.items()
            if n in differentiated and is_float(np.asarray(a).dtype)]


class GraphModule(Module):
    """Replays `graph` on its inputs.  trainable: the initializer names to train (None:
    trainable_initializers(graph)); the other initializers are Buffers."""

    def __init__(self, graph, trainable=None):
        super().__init__()
        floats = [n for n, a in graph.initializers.items() if is_float(np.asarray(a).dtype)]
        trainable = trainable_initializers(graph) if trainable is None else list(trainable)
        unknown = sorted(set(trainable) - set(floats))
        if unknown:
            raise ValueError(f"GraphModule: {unknown} are not floating-point initializers of graph "
                             f"{graph.name!r}; trainable ones are {floats}")
        self.graph = graph
        for name, array in graph.initializers.items():
            setattr(self, name, Parameter(array) if name in trainable else Buffer(array))

    def forward(self, *inputs):
        graph = self.graph
        if len(inputs) != len(graph.inputs):
            raise TypeError(f"GraphModule({graph.name!r}) takes {len(graph.inputs)} inputs "
                            f"{graph.input_names}, got {len(inputs)}")
        builder = inputs[0].builder
        # The nodes keep the meaning they had at the graph's own opsets (attributes and
        # defaults change between versions), so the recording graph imports those.
        builder.graph.opset_imports.update(graph.opset_imports)
        state = {**self._parameters, **self._buffers}
        env = dict(zip(graph.input_names, inputs))
        shapes = ShapeFolder(graph.initializers)

        def dims_of(name):
            value = env.get(name, state.get(name))
            return None if value is None else value.shape

        for node in topological_order(graph):
            if shapes.try_fold(node, node.attrs, graph.opset(node.domain), dims_of):
                continue
            args = [None if not name else self._argument(builder, shapes, node, i, env, state, dims_of)
                    for i, name in enumerate(node.inputs)]
            if node.op_type == "BatchNormalization" and not node.domain:
                results = self._batch_norm(builder, node, args)
            else:
                slots = [True if out else None for out in node.outputs]
                results = builder.op(node.op_type, args, node.attrs, domain=node.domain, outputs=slots)
            results = results if isinstance(results, tuple) else (results,)
            env.update((out, t) for out, t in zip(node.outputs, results) if out)
        outputs = tuple(env[name] for name in graph.outputs)
        return outputs[0] if len(outputs) == 1 else outputs

    @staticmethod
    def _argument(builder, shapes, node, index, env, state, dims_of):
        """Input `index` of `node`: a value of the trace, a parameter or buffer, the constant a
        folded shape subgraph computed, or the shape subgraph recorded to run (once per value)."""
        name = node.inputs[index]
        if shapes.is_shape_value(name) and name not in env:
            array = shapes.constant_for(name, node, index, dims_of(node.inputs[0]))
            if array is not None:
                return builder.constant(array, "shape")
            for step in shapes.run_time_nodes(name):
                args = [None if not x else env[x] if x in env else builder.constant(shapes.values[x].array(), "shape")
                        if shapes.is_shape_value(x) else state[x] for x in step.inputs]
                env[step.outputs[0]] = builder.op(step.op_type, args, step.attrs, domain=step.domain)
        return env[name] if name in env else state[name]

    def _batch_norm(self, builder, node, args):
        """A BatchNormalization node in training mode: in a training graph its running
        statistics become state updates of the initializers they were computed from; in an
        inference graph it runs on those statistics (its inference form, Y only)."""
        slots = [True if out else None for out in node.outputs]
        declared = {name for name, out in zip(BN_OUTPUTS, node.outputs) if out}
        if not is_training(node.attrs, declared.__contains__):
            return builder.op(node.op_type, args, node.attrs, outputs=slots)
        if not builder.training:
            attrs = {**node.attrs, "training_mode": 0} if "training_mode" in node.attrs else node.attrs
            return (builder.op(node.op_type, args, attrs),)
        results = builder.op(node.op_type, args, node.attrs, outputs=slots)
        results = results if isinstance(results, tuple) else (results,)
        for i in RUNNING_OUTPUTS:
            statistic = args[i + 2]
            if i < len(results) and results[i] is not None and isinstance(statistic, Parameter):
                builder.state_updates[results[i].name] = builder.parameter(statistic)
        return results
