"""Running nodes: `run_node` for one node on NumPy arrays, `Executor` for a scheduled plan.

Both run nodes bound by binding.py (the schema in force, the checked and completed attributes,
the kernel from the registry); neither branches on the provider.  The executor runs the plan it
is given: planning is the scheduler's (scheduler.py).
"""
from __future__ import annotations

import threading

import numpy as np

from .binding import bind_node
from .errors import DTypeError, OpAttributeError
from .ops import get_schema
from .ops.schema import TensorType
from .profiling import NodeProfiler
from .providers import get_provider


def newest_opset(op_type, domain):
    """The opset at which the newest version of an op starts."""
    return get_schema(op_type, domain, None).since_version


def run_node(op_type, inputs, *, attrs=None, domain="", opset=None, provider="cpu", outputs=None,
             output_shapes=None):
    """Run one node through the registry and return a list of its outputs.

    On the CPU, inputs and outputs are NumPy arrays.  On another provider, NumPy inputs are
    copied in and the results come back as NumPy arrays; when any input is already a device
    tensor of that provider, the results stay on the device.

    `inputs` may hold None for an absent optional input; `attrs` uses ONNX attribute names;
    `opset` is the version the node's domain imports (None: the newest registered); `outputs`
    is None for all of the op's outputs, or a list of output names returned in that order (a
    kernel computes only what is asked); `output_shapes` maps output names to shapes the graph
    would know (pool gradients read dX's shape from it).
    """
    prov = get_provider(provider)
    if opset is None:
        opset = newest_opset(op_type, domain)
    native = any(x is not None and not isinstance(x, np.ndarray) and prov.is_native(x) for x in inputs)
    arrays = [x if x is None or prov.is_native(x) else _to_host(x) for x in inputs]
    types = [None if a is None else TensorType(np.dtype(a.dtype), tuple(a.shape)) for a in arrays]
    bound, _ = bind_node(op_type, types, attrs, domain=domain, opset=opset, provider=prov,
                         wanted=None if outputs is None else list(outputs))
    shapes = {}
    for name, shape in (output_shapes or {}).items():
        if name not in bound.schema.outputs:
            raise OpAttributeError(f"{op_type}: output_shapes names {name!r}, which is not an output "
                                   f"of the op ({list(bound.schema.outputs)})")
        shapes[name] = tuple(int(d) for d in shape)
    kdef = bound.kdef
    placed = [None if a is None else _to_host(a) if prov.host_memory or kdef.input_on_host(i) else prov.as_native(a)
              for i, a in enumerate(arrays)]
    results = bound.run(prov, placed, shapes)
    if native:
        return results
    return [r if isinstance(r, np.ndarray) else prov.to_numpy(r) for r in results]


def _to_host(value):
    """A C-contiguous host (NumPy) array of a value that a kernel reads from host memory (a
    device tensor of another provider is copied to the host)."""
    if isinstance(value, np.ndarray):     # ascontiguousarray would make a 0-d array 1-d
        return value if value.flags.c_contiguous else np.ascontiguousarray(value)
    return np.asarray(value.get()) if hasattr(value, "get") else np.asarray(value)


class Executor:
    """Runs an execution plan (see scheduler.py) on its providers.

    Values are dropped from the environment right after their last consumer has run, so the
    provider can free or reuse their memory.  Initializers live where the plan places them:
    in `state` (a DeviceState shared by a session's plans) when given, else in tensors made
    once here.  `write_back` maps output values to the initializers they replace after each
    run (BatchNorm's running statistics), copied in the initializer's own memory.  The values
    the plan folded (plan.constants) are uploaded once, into tensors of this executor.  With
    `profile=True`, per-node times (host wall time on the CPU, GPU time between events on a
    device) are kept by `self.profiler` (profiling.NodeProfiler): `self.profile` sums them
    per node (node name -> seconds) over `self.calls` runs.  With `capture=True`, a provider
    that can (CUDA) captures the whole step into a graph and replays it (see step_replay.py and
    providers/cuda/capture/step_graph.py; `self.graphs`); profiling runs uncaptured.  On the CPU,
    `capture=True` serves the step's allocations from a planned arena
    (providers/cpu/step_arena.py), profiled or not.

    `providers` maps provider names to the Provider objects to use (a session's own); the
    others are found by name.
    """

    def __init__(self, plan, *, profile=False, state=None, providers=None, write_back=None, capture=False):
        self.plan = plan
        self.providers = {name: (providers or {}).get(name) or get_provider(name) for name in plan.providers}
        self.provider = self.providers[plan.providers[0]]
        self.profiler = NodeProfiler() if profile else None
        self.calls = 0
        self._calls_lock = threading.Lock()     # run() may be called from several threads
        self.write_back = dict(write_back or {})
        self.state = state
        self.constants = {}
        for name, array in plan.graph.initializers.items():
            location = plan.locations[name]
            if state is not None and state.provider.name == location:
                self.constants[name] = state.native(name, array)
            else:
                self.constants[name] = self.providers[location].from_numpy(array)
        for name, array in plan.constants.items():     # folded at plan time: not state, the plan's own
            self.constants[name] = self.providers[plan.locations[name]].from_numpy(array)
        self._needed_inputs = [n for n in plan.graph.input_names if n in plan.needed_inputs]
        keep = set(plan.fetch) | set(self.write_back)
        # what execute reads of each step, settled once: (step, its output_shapes, its bound
        # node, its provider, input names, the names of the outputs it produces, the values to
        # drop after it)
        self._program = [(step, step.output_shapes, step.bound, self.providers[step.provider],
                          tuple(step.node.inputs), tuple(o for o in step.node.outputs if o),
                          tuple(n for n in step.frees if n not in keep))
                         for step in plan.steps]
        self.graphs = (self.provider.step_graphs(self)
                       if capture and (not profile or self.provider.profiles_step_graphs) else None)

    @property
    def profile(self):
        """Node name -> seconds summed over the profiled runs."""
        return self.profiler.totals if self.profiler is not None else {}

    def run(self, feeds, fetch=None, *, to_host=True):
        """Run the plan on `feeds` (input name -> NumPy array or a provider-native tensor, which
        is used without a copy); return a dict of the fetched values (default: all that the
        plan was made for), as NumPy arrays, or where they live when `to_host` is False (a
        captured step's values live in its arena: valid until the next run)."""
        plan = self.plan
        fetch = list(plan.fetch if fetch is None else fetch)
        extra = [f for f in fetch if f not in plan.fetch]
        if extra:
            raise ValueError(f"cannot fetch {extra}: the plan was scheduled for {plan.fetch}")
        fed, dims = self._checked_feeds(feeds)
        dims_key = tuple(sorted(dims.items()))
        if self.graphs is not None and not self.graphs.disabled:
            values = self.graphs.run(fed, dims, dims_key)
        else:
            values = self.execute(self.place_inputs(fed), dims, dims_key)
        if self.profiler is not None:
            self.profiler.end_run()
        with self._calls_lock:
            self.calls += 1
        if not to_host:
            return {name: values[name] for name in fetch}
        return {name: self._host(name, values[name]) for name in fetch}

    def _checked_feeds(self, feeds):
        """The fed inputs the plan needs (dtype and shape checked) and the symbolic dims they bind."""
        plan = self.plan
        missing = [n for n in self._needed_inputs if n not in feeds]
        if missing:
            raise ValueError(f"graph {plan.graph.name!r}: no value fed for input(s) {missing}")
        fed, dims = {}, {}
        for value in plan.graph.inputs:
            if value.name in feeds:
                array = feeds[value.name]
                if not hasattr(array, "dtype"):
                    array = np.asarray(array)
                if np.dtype(array.dtype) != value.dtype:
                    raise DTypeError(f"graph {plan.graph.name!r}: input {value.name!r} is declared {value.dtype}, "
                                     f"fed {np.dtype(array.dtype)}")
                _bind_dims(value, tuple(array.shape), dims)
                fed[value.name] = array
        return fed, dims

    def place_inputs(self, fed):
        """The fed inputs where the plan reads them (copied to the device where needed)."""
        placed = {}
        for name, array in fed.items():
            provider = self.providers[self.plan.locations[name]]
            placed[name] = _to_host(array) if provider.host_memory else provider.as_native(array)
        return placed

    def execute(self, inputs, dims, dims_key):
        """Run every step on the constants and `inputs` (placed); apply the write-backs; return
        every value the plan fetches."""
        plan = self.plan
        env = {**self.constants, **inputs}
        profiler = self.profiler
        for step, output_shapes, bound, provider, input_names, output_names, drops in self._program:
            args = [env[n] if n else None for n in input_names]
            if profiler is not None:
                results = profiler.run(step, provider, args, output_shapes(dims, dims_key))
            else:
                results = bound.run(provider, args, output_shapes(dims, dims_key))
            env.update(zip(output_names, results))
            for name in drops:
                env.pop(name, None)
        for out_name, initializer in self.write_back.items():
            self.providers[plan.locations[initializer]].copy_into(env[initializer], env[out_name])
        return {name: env[name] for name in plan.fetch}

    def _host(self, name, value):
        if isinstance(value, np.ndarray):
            return value
        return self.providers[self.plan.locations[name]].to_numpy(value)


def _bind_dims(value, shape, dims):
    """Record what each symbolic dim of a graph input stands for in this run."""
    if value.shape is None:
        return
    if len(value.shape) != len(shape):
        raise ValueError(f"input {value.name!r} expects rank {len(value.shape)} {value.shape}, got shape {shape}")
    for declared, actual in zip(value.shape, shape):
        if isinstance(declared, str):
            if dims.setdefault(declared, actual) != actual:
                raise ValueError(f"input {value.name!r}: dim {declared!r} is {dims[declared]} elsewhere, here {actual}")
        elif declared is not None and declared != actual:
            raise ValueError(f"input {value.name!r} expects shape {value.shape}, got {shape}")
