"""CheckpointState: the parameters, optimizer state and properties of a training run, as
onnxruntime.training.api.CheckpointState holds them, read from and written to ONNX Runtime's
checkpoint file (ort_checkpoint_format.py), so that a checkpoint written by either runs in the
other.

The values live where the Module that uses the state runs them: NumPy arrays on the CPU,
device tensors on CUDA (`Parameter.data` and `.grad` copy them to the host there).  The
optimizer state is the groups of ONNX Runtime's format; ONNX Runtime trains one group,
"group0", whose per-parameter moments are "momentum0" (and "momentum1" for AdamW).
"""
from __future__ import annotations

import numbers
import os

import numpy as np

from ...providers import get_provider
from ..ort_checkpoint_format import CheckpointContents, OptimizerGroupState, read_checkpoint, write_checkpoint

DEFAULT_LEARNING_RATE = 1e-3    # ONNX Runtime's initial learning rate of a group (torch's AdamW default)


class Parameter:
    """One parameter of a CheckpointState: name, data, gradient (None before the first
    training step), requires_grad."""

    def __init__(self, state, name):
        self._state, self.name = state, name

    @property
    def data(self):
        """The parameter's values, as a NumPy array (the live array on the CPU)."""
        return self._state.host(self._state.values[self.name])

    @data.setter
    def data(self, value):
        self._state.assign(self.name, value)

    @property
    def grad(self):
        """The gradient accumulated by the last training steps, or None before the first."""
        grad = self._state.grads.get(self.name)
        return None if grad is None else self._state.host(grad)

    @property
    def requires_grad(self):
        return self.name in self._state.trainable

    def __repr__(self):
        return f"Parameter(name={self.name}, requires_grad={self.requires_grad})"


class Parameters:
    """The parameters by name, like a dict: `state.parameters["fc.w"]`, `name in`,
    iteration over (name, Parameter) pairs in name order, `len`."""

    def __init__(self, state):
        self._state = state

    def __getitem__(self, name):
        if name not in self:
            raise KeyError(f"Parameter {name} not found.")
        return Parameter(self._state, name)

    def __setitem__(self, name, value):
        if name not in self:
            raise KeyError(f"Parameter {name} not found.")
        self._state.assign(name, value)

    def __contains__(self, name):
        return name in self._state.values

    def __iter__(self):
        for name in sorted(self._state.values):
            yield name, Parameter(self._state, name)

    def __len__(self):
        return len(self._state.values)


class Properties:
    """User properties (int, float or str values) by name, saved in the checkpoint's property
    bag; like a dict, iteration gives (name, value) pairs in name order."""

    def __init__(self, state):
        self._state = state

    def __getitem__(self, name):
        if name not in self:
            raise KeyError(f"Property {name} not found.")
        return self._state.property_values[name]

    def __setitem__(self, name, value):
        if isinstance(value, bool) or not isinstance(value, (numbers.Integral, numbers.Real, str)):
            raise TypeError(f"CheckpointState property {name!r}: the value must be an int, a float or a str, got "
                            f"{value!r} ({type(value).__name__})")
        self._state.property_values[str(name)] = value if isinstance(value, str) else \
            int(value) if isinstance(value, numbers.Integral) else float(np.float32(value))

    def __contains__(self, name):
        return name in self._state.property_values

    def __iter__(self):
        for name in sorted(self._state.property_values):
            yield name, self._state.property_values[name]

    def __len__(self):
        return len(self._state.property_values)


class CheckpointState:
    """The state of a training run; make one with `CheckpointState.load_checkpoint(path)`."""

    def __init__(self, contents: CheckpointContents):
        self.values = {**contents.trainable, **contents.frozen}     # name -> array (native)
        self.trainable = set(contents.trainable)
        self.grads = {}                                             # name -> array (native)
        self.optimizer_groups = contents.optimizer_groups           # name -> OptimizerGroupState
        self.property_values = dict(contents.properties)
        self.provider = get_provider("cpu")
        self.compiled = False       # whether a Module's compiled steps are bound to the tensors
        self._parameters, self._properties = Parameters(self), Properties(self)

    @classmethod
    def load_checkpoint(cls, checkpoint_uri):
        """The state in the checkpoint file at `checkpoint_uri` (ONNX Runtime's format);
        CheckpointError naming the file when it is not one, or is corrupt."""
        return cls(read_checkpoint(os.fspath(checkpoint_uri)))

    @classmethod
    def save_checkpoint(cls, state, checkpoint_uri, include_optimizer_state=False):
        """Write `state` to `checkpoint_uri` in ONNX Runtime's format: the parameters, the
        properties, and with include_optimizer_state the optimizer groups (step, initial
        learning rate, moments)."""
        host = {name: state.host(value).copy() for name, value in state.values.items()}
        groups = {}
        if include_optimizer_state:
            for name, group in state.optimizer_groups.items():
                groups[name] = OptimizerGroupState(
                    group.step, group.initial_learning_rate,
                    {p: {k: state.host(v).copy() for k, v in moments.items()} for p, moments in group.states.items()})
        contents = CheckpointContents(trainable={n: a for n, a in host.items() if n in state.trainable},
                                      frozen={n: a for n, a in host.items() if n not in state.trainable},
                                      optimizer_groups=groups, properties=dict(state.property_values))
        write_checkpoint(contents, os.fspath(checkpoint_uri))

    @property
    def parameters(self):
        return self._parameters

    @property
    def properties(self):
        return self._properties

    # ---------------------------------------------------------------- for Module and Optimizer
    def host(self, value):
        """A value of this state as a NumPy array."""
        return value if isinstance(value, np.ndarray) else self.provider.to_numpy(value)

    def assign(self, name, value):
        """Copy `value` into parameter `name`, in place (a compiled step keeps reading it)."""
        current = self.values[name]
        array = np.asarray(value)
        if array.shape != tuple(current.shape) or array.dtype != current.dtype:
            raise ValueError(f"CheckpointState: parameter {name!r} is {current.dtype}{tuple(current.shape)}, the new "
                             f"value {array.dtype}{array.shape}")
        self.provider.copy_into(current, self.provider.as_native(np.ascontiguousarray(array)))

    def move_to(self, provider):
        """Keep every value in `provider`'s memory from now on (a Module's device)."""
        provider = get_provider(provider)
        if provider is self.provider:
            return
        def move(value):
            return provider.from_numpy(np.ascontiguousarray(self.host(value)))
        self.values = {n: move(v) for n, v in self.values.items()}
        self.grads = {n: move(v) for n, v in self.grads.items()}
        for group in self.optimizer_groups.values():
            group.states = {p: {k: move(v) for k, v in moments.items()} for p, moments in group.states.items()}
        self.provider = provider
