"""Module: the training and eval models that onnxruntime.training.artifacts writes, run by
minitrain's kernels as onnxruntime.training.api.Module runs them.

The training model takes the user's inputs (the model's inputs, then the labels), every
parameter, one gradient accumulation buffer per trainable parameter
(`<param>_grad.accumulation.buffer`) and the bool `lazy_reset_grad`; it returns the loss (and
any additional outputs), and its InPlaceAccumulatorV2 nodes write each gradient into its buffer
(overwriting it after `lazy_reset_grad()`, adding to it otherwise).  The eval model takes the
user's inputs and the parameters.  The parameters, their gradients and the optimizer's moments
live in the CheckpointState, on the Module's device, and stay there across steps: each model is
compiled into a step bound to those tensors (compiled_step.py; planned once per input shapes),
which a CUDA device captures into a CUDA Graph and replays after warm-up (the CPU serves the
step from its arena).
`lazy_reset_grad` and the user's inputs are fed to the captured step on every run; parameters
are pulled to the host when read (get_contiguous_parameters, `state.parameters[...].data`,
checkpoints) and pushed when written (copy_buffer_to_parameters).  `capture=False` runs every
step node by node, for debugging.
"""
from __future__ import annotations

import os

import numpy as np

from ...providers import get_provider
from .._backend import require_onnx
from ..importer import load
from .compiled_step import CompiledStep

BUFFER_SUFFIX = "_grad.accumulation.buffer"
ACCUMULATED_SUFFIX = "_grad.accumulation.out"
RESET_INPUT = "lazy_reset_grad"
DEVICES = ("cpu", "cuda")


class Module:
    """training_model.onnx (train_model_uri) and eval_model.onnx (eval_model_uri, optional)
    run on `device` ("cpu" or "cuda") with the parameters of `state` (a CheckpointState).
    capture: capture each step (see the module docstring); off runs it node by node."""

    def __init__(self, train_model_uri, state, eval_model_uri=None, device="cpu", *, capture=True):
        if device not in DEVICES:
            raise ValueError(f"Module: device must be one of {DEVICES}, got {device!r}")
        self.training = True
        self.device = device
        self.capture = bool(capture)
        self._state = state
        self._train_graph = load(os.fspath(train_model_uri))
        names = self._train_graph.input_names
        self._trainable = [n[:-len(BUFFER_SUFFIX)] for n in names if n.endswith(BUFFER_SUFFIX)]
        if RESET_INPUT not in names or not self._trainable:
            raise ValueError(f"Module: {os.fspath(train_model_uri)} is not an onnxruntime-training training model "
                             f"(no {RESET_INPUT!r} input or no '*{BUFFER_SUFFIX}' inputs); its inputs are {names}")
        state_inputs = [n for n in names if n in state.values]
        self._parameter_names = [n for n in state_inputs if n in self._trainable] + \
                                [n for n in state_inputs if n not in self._trainable]
        missing = [p for p in self._trainable if p not in state.values]
        untrained = [p for p in self._trainable if p in state.values and p not in state.trainable]
        if missing or untrained:
            raise ValueError("Module: the checkpoint state " + (f"has no parameter(s) {missing}" if missing else
                             f"holds {untrained} as frozen, but the training model trains them") +
                             f" (its parameters: {sorted(state.values)})")
        internal = set(state_inputs) | {p + BUFFER_SUFFIX for p in self._trainable} | {RESET_INPUT}
        self._train_inputs = [n for n in names if n not in internal]
        self._train_outputs = [n for n in self._train_graph.outputs if not n.endswith(ACCUMULATED_SUFFIX)]
        if state.provider.name != device:
            if state.compiled:      # moving the tensors would leave that Module's steps on stale ones
                raise ValueError(f"Module: a Module on {state.provider.name} trains this CheckpointState; load the "
                                 f"checkpoint again for a Module on {device}")
            state.move_to(get_provider(device).for_session())
        for p in self._trainable:
            if p not in state.grads:
                value = state.values[p]
                state.grads[p] = state.provider.zeros(tuple(value.shape), value.dtype)
        accumulated = self._expose_accumulated()
        running_stats = self._adapt_batch_norms()
        tensors = {p: state.values[p] for p in self._parameter_names}
        tensors.update((p + BUFFER_SUFFIX, state.grads[p]) for p in self._trainable)
        self._train_step = CompiledStep(self._train_graph, self._train_outputs + accumulated + list(running_stats),
                                        state.provider, tensors, write_back=running_stats, capture=self.capture)
        state.compiled = True
        self._eval_model_uri = None if eval_model_uri is None else os.fspath(eval_model_uri)
        self._eval_graph = self._eval_step = None
        if eval_model_uri is not None:
            self._eval_graph = load(self._eval_model_uri)
            eval_state = [n for n in self._eval_graph.input_names if n in state.values]
            self._eval_inputs = [n for n in self._eval_graph.input_names if n not in eval_state]
            self._eval_step = CompiledStep(self._eval_graph, list(self._eval_graph.outputs), state.provider,
                                           {p: state.values[p] for p in eval_state}, capture=self.capture)
        self._reset = True

    def _expose_accumulated(self):
        """The values the accumulators write (each buffer, updated in place), fetched so that
        every training step runs them; gives InPlaceAccumulatorV2 its optional second output
        where it has none."""
        buffers = {p + BUFFER_SUFFIX: p for p in self._trainable}
        outputs = {}
        for node in self._train_graph.nodes:
            if node.op_type == "InPlaceAccumulatorV2" and node.inputs[0] in buffers:
                if len(node.outputs) < 2 or not node.outputs[1]:
                    node.outputs = [node.outputs[0], f"{node.inputs[0]}.accumulated"]
                outputs[buffers[node.inputs[0]]] = node.outputs[1]
        missing = sorted(set(self._trainable) - set(outputs))
        if missing:
            raise ValueError(f"Module: no InPlaceAccumulatorV2 node writes the gradient of {missing}")
        return list(outputs.values())

    def _adapt_batch_norms(self):
        """What ONNX Runtime's BatchNormInternal nodes mean beyond their attributes: their
        BatchNormalizationGrad (which ONNX Runtime only ever uses in training) is the
        training-mode gradient, and the running mean and variance they output update the
        state's values in place, as ONNX Runtime's kernel writes them into its inputs.
        Returns {running statistic output: the state value it updates}."""
        saved = {}
        updates = {}
        for node in self._train_graph.nodes:
            if node.op_type == "BatchNormInternal" and node.attrs.get("training_mode", 0):
                saved.update((name, node) for name in node.outputs[3:5] if name)
                for stat, index in (("mean", 1), ("var", 2)):
                    source = node.inputs[2 + index]
                    if source in self._state.values:
                        if len(node.outputs) <= index or not node.outputs[index]:
                            node.outputs = list(node.outputs) + [""] * (index + 1 - len(node.outputs))
                            node.outputs[index] = f"{node.name}.running_{stat}"
                        updates[node.outputs[index]] = source
        for node in self._train_graph.nodes:
            if node.op_type == "BatchNormalizationGrad" and node.inputs[3] in saved:
                node.attrs["training_mode"] = 1
        return updates

    # ------------------------------------------------------------------ steps
    def __call__(self, *user_inputs):
        """A training step (forward, backward, gradients accumulated into the state) or, in
        eval mode, an eval step, on the user's inputs in input_names() order; returns the
        outputs (the loss first), one array alone."""
        names = self.input_names()
        if len(user_inputs) != len(names):
            raise TypeError(f"Module takes {len(names)} inputs {names} in {'training' if self.training else 'eval'} "
                            f"mode, got {len(user_inputs)}")
        feeds = dict(zip(names, user_inputs))
        if self.training:
            feeds[RESET_INPUT] = np.array([self._reset])
            results = self._train_step.run(feeds)
            self._reset = False
            outputs = self._train_outputs
        else:
            if self._eval_step is None:
                raise RuntimeError("Module: eval mode needs the eval model; pass eval_model_uri")
            results = self._eval_step.run(feeds)
            outputs = self._eval_graph.outputs
        values = [np.array(self._state.host(results[name])) for name in outputs]
        return values[0] if len(values) == 1 else tuple(values)

    def train(self, mode=True):
        """Training mode (or eval mode with mode=False); returns self."""
        self.training = bool(mode)
        return self

    def eval(self):
        """Eval mode; returns self."""
        return self.train(False)

    def lazy_reset_grad(self):
        """The next training step overwrites the gradients instead of adding to them."""
        self._reset = True

    def input_names(self):
        """The user inputs of the training model (or of the eval model in eval mode)."""
        return list(self._train_inputs if self.training or self._eval_graph is None else self._eval_inputs)

    def output_names(self):
        """The user outputs of the training model (or of the eval model in eval mode)."""
        return list(self._train_outputs if self.training or self._eval_graph is None else self._eval_graph.outputs)

    # ------------------------------------------------------------------ parameters
    def _parameters(self, trainable_only):
        return self._trainable if trainable_only else self._parameter_names

    def get_parameters_size(self, trainable_only=True):
        """The number of elements of the (trainable) parameters."""
        return sum(int(np.prod(self._state.values[p].shape)) for p in self._parameters(trainable_only))

    def get_contiguous_parameters(self, trainable_only=False):
        """The parameters flattened into one float32 array, in the training model's order."""
        return np.concatenate([self._state.host(self._state.values[p]).astype(np.float32).reshape(-1)
                               for p in self._parameters(trainable_only)])

    def copy_buffer_to_parameters(self, buffer, trainable_only=True):
        """Copy a flat buffer (as get_contiguous_parameters gives) into the parameters."""
        buffer = np.asarray(buffer).reshape(-1)
        size = self.get_parameters_size(trainable_only)
        if buffer.size != size:
            raise ValueError(f"Module.copy_buffer_to_parameters: the buffer holds {buffer.size} values, the "
                             f"{'trainable ' if trainable_only else ''}parameters {size}")
        offset = 0
        for p in self._parameters(trainable_only):
            value = self._state.values[p]
            count = int(np.prod(value.shape))
            self._state.assign(p, buffer[offset:offset + count].reshape(value.shape).astype(value.dtype))
            offset += count

    def export_model_for_inferencing(self, inference_model_uri, graph_output_names):
        """Write the eval model with the current parameters as initializers, cut down to the
        nodes that produce `graph_output_names` and the inputs they read."""
        onnx = require_onnx()
        if self._eval_model_uri is None:
            raise RuntimeError("Module.export_model_for_inferencing needs the eval model; pass eval_model_uri")
        model = onnx.shape_inference.infer_shapes(onnx.load(self._eval_model_uri))
        graph = model.graph
        known = {v.name: v for v in list(graph.value_info) + list(graph.output) + list(graph.input)}
        unknown = [n for n in graph_output_names if n not in known]
        if unknown:
            raise ValueError(f"Module.export_model_for_inferencing: {unknown} are not values of the eval model "
                             f"{self._eval_model_uri}")
        needed, kept = set(graph_output_names), []
        for node in reversed(graph.node):
            if any(o in needed for o in node.output):
                kept.append(node)
                needed.update(i for i in node.input if i)
        inputs = [v for v in graph.input if v.name in needed and v.name not in self._state.values]
        initializers = [onnx.numpy_helper.from_array(self._state.host(self._state.values[n]), n)
                        for n in sorted(needed) if n in self._state.values]
        initializers += [t for t in graph.initializer if t.name in needed]
        inference = onnx.helper.make_graph(list(reversed(kept)), graph.name, inputs,
                                      [known[n] for n in graph_output_names], initializers)
        exported = onnx.helper.make_model(inference, opset_imports=model.opset_import, producer_name="minitrain")
        exported.ir_version = model.ir_version
        onnx.save(exported, os.fspath(inference_model_uri))
