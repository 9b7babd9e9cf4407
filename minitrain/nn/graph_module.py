"""GraphModule: a Module whose forward replays a Graph (one imported from ONNX, say).

Its initializers become the module's state under their own names: the trainable ones
Parameters, the rest Buffers; so a graph with no Python model behind it trains in a
TrainingSession like any nn model.
"""
from __future__ import annotations

import numpy as np

from ..inference import topological_order
from .module import Buffer, Module, Parameter


class GraphModule(Module):
    """Replays `graph` on its inputs.  trainable: the initializer names to train (None: every
    floating-point initializer); the other initializers are Buffers."""

    def __init__(self, graph, trainable=None):
        super().__init__()
        floats = [n for n, a in graph.initializers.items() if np.issubdtype(np.asarray(a).dtype, np.floating)]
        trainable = floats if trainable is None else list(trainable)
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
        for node in topological_order(graph):
            args = [None if not name else env[name] if name in env else state[name] for name in node.inputs]
            slots = [True if out else None for out in node.outputs]
            results = builder.op(node.op_type, args, node.attrs, domain=node.domain, outputs=slots)
            results = results if isinstance(results, tuple) else (results,)
            env.update((out, t) for out, t in zip(node.outputs, results) if out)
        outputs = tuple(env[name] for name in graph.outputs)
        return outputs[0] if len(outputs) == 1 else outputs
