"""The compiled steps of Module and Optimizer: an artifact's graph whose parameter, gradient and
optimizer-state inputs become initializers bound to the CheckpointState's own tensors, fused
and scheduled on the device, and run by an Executor that captures the step (a CUDA Graph
replayed after warm-up; the step arena on the CPU), as a TrainingSession runs its plans.

The state's tensors then never travel through the host: the kernels read them where they live
and the in-place updates (InPlaceAccumulatorV2, the optimizers) write them there.  A state
tensor that only a host kernel reads (a node the device has no kernel for) stays a graph input,
fed from the state on every run, so that it is never read stale.

A step is planned once per signature of its inputs (their shapes and dtypes), with those shapes
in the graph, so that the values they decide (Shape, Size and the arithmetic on them that
ONNX Runtime's gradient graphs hold) are folded into constants at plan time
(constant_folding.py) instead of being computed at every step.  The graph with its symbolic
shapes is planned once when the step is made, so that a graph minitrain cannot run fails
there, before the first step.
"""
from __future__ import annotations

import collections

import numpy as np

from ...executor import Executor
from ...fusion import fuse as fuse_graph
from ...providers import provider_list
from ...scheduler import schedule
from .constant_folding import fold_constants


class StateTensors:
    """Tensors of a CheckpointState under the names a compiled graph gives them, served to an
    Executor as its `state` (the interface of training/state.DeviceState): its initializers
    are these tensors themselves, never copies; the model's own constants are made from the
    graph's arrays."""

    def __init__(self, provider, tensors):
        self.provider = provider
        self._tensors = dict(tensors)

    def native(self, name, array=None):
        """The state's tensor named `name`, or a tensor made once from `array` (a constant)."""
        if name not in self._tensors:
            self._tensors[name] = self.provider.from_numpy(array)
        return self._tensors[name]

    def __contains__(self, name):
        return name in self._tensors


class CompiledStep:
    """`graph` run on `provider` (the Module's) for `fetch`, with the graph inputs named in
    `tensors` (name -> the state's tensor) bound to those tensors; `write_back` maps outputs to
    the state tensors they overwrite after each run; `capture` turns capture off when False."""

    def __init__(self, graph, fetch, provider, tensors, write_back=None, capture=True):
        self.provider = provider
        self._graph, self._fetch, self._tensors = graph, list(fetch), dict(tensors)
        self._providers = tuple(provider_list(provider.name))
        self._write_back, self._capture = write_back, capture
        self.executors = {}         # input signature -> the Executor of the plan specialized to it
        self._fed = {}              # input signature -> the state tensors that plan is fed
        self._split()

    def _split(self, shapes=None):
        """(plan, bound, fed): the plan with `shapes` (see _plan), the state tensors bound to it
        and those fed to it instead, that it reads in another provider's memory."""
        bound = dict(self._tensors)
        plan = self._plan(bound, shapes)
        foreign = [name for name in bound if plan.locations.get(name, self.provider.name) != self.provider.name]
        if foreign:
            for name in foreign:
                del bound[name]
            plan = self._plan(bound, shapes)
        return plan, bound, {name: self._tensors[name] for name in foreign}

    def _plan(self, bound, shapes=None):
        """The plan of the graph with the inputs in `bound` turned into initializers (holding
        the state's values as they are now: the executor reads the tensors themselves), and
        with `shapes` (input name -> shape) given, specialized to those input shapes."""
        graph = self._graph.copy()
        graph.inputs = [v for v in graph.inputs if v.name not in bound]
        for name, tensor in bound.items():
            graph.add_initializer(name, self._host(tensor))
        if shapes is not None:
            for value in graph.inputs:
                value.shape = shapes.get(value.name, value.shape)
            fold_constants(graph, set(self._fetch), set(bound))
        return schedule(fuse_graph(graph, self._fetch, self._providers), self._fetch, self._providers)

    def _host(self, tensor):
        return tensor if self.provider.host_memory else self.provider.to_numpy(tensor)

    def run(self, feeds):
        """Run the step on the user's `feeds` (and the state tensors it is fed); the fetched
        values where they live (a captured step's: valid until the next run)."""
        feeds = {name: value if hasattr(value, "dtype") else np.asarray(value) for name, value in feeds.items()}
        signature = tuple((name, tuple(value.shape), value.dtype) for name, value in feeds.items())
        executor = self.executors.get(signature)
        if executor is None:
            plan, bound, fed = self._split(self._input_shapes(feeds))
            executor = Executor(plan, state=StateTensors(self.provider, bound),
                                providers={self.provider.name: self.provider}, capture=self._capture,
                                write_back=self._write_back)
            self.executors[signature], self._fed[signature] = executor, fed
        fed = self._fed[signature]
        return executor.run({**feeds, **fed} if fed else feeds, to_host=False)

    def _input_shapes(self, feeds):
        """The shape of each graph input fed in `feeds`, checked against the declared shapes as the
        executor checks them (a symbolic dim stands for one size in all the inputs)."""
        shapes, dims = {}, {}
        for value in self._graph.inputs:
            if value.name not in feeds:     # the executor says whether the plan needs it
                continue
            shape = shapes[value.name] = tuple(int(d) for d in feeds[value.name].shape)
            if value.shape is None:
                continue
            if len(value.shape) != len(shape):
                raise ValueError(f"input {value.name!r} expects rank {len(value.shape)} {value.shape}, got shape "
                                 f"{shape}")
            for declared, actual in zip(value.shape, shape):
                if isinstance(declared, str):
                    if dims.setdefault(declared, actual) != actual:
                        raise ValueError(f"input {value.name!r}: dim {declared!r} is {dims[declared]} elsewhere, "
                                         f"here {actual}")
                elif declared is not None and declared != actual:
                    raise ValueError(f"input {value.name!r} expects shape {value.shape}, got {shape}")
        return shapes

    @property
    def replay_stats(self):
        """The executors' capture counters summed (CUDA: warmups, records, captures, replays;
        CPU's step arena: warmups, traces, replays), empty where nothing is captured."""
        stats = collections.Counter()
        for executor in self.executors.values():
            if executor.graphs is not None:
                stats.update(executor.graphs.stats)
        return dict(stats)
