"""Running nodes: `run_node` for one node on NumPy arrays, `Executor` for a scheduled plan.

Both go through `bind_node`, which resolves the schema in force, checks and completes the
attributes and picks the kernel from the registry; neither branches on the provider.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .errors import OpAttributeError
from .ops import get_schema, infer_node, resolve_attrs
from .ops.schema import TensorType
from .providers import get_provider
from .registry import KernelContext, lookup


@dataclass
class BoundNode:
    """A node with its schema, resolved attributes and kernel settled."""
    op_type: str
    name: str
    schema: object
    attrs: dict
    kernel: object
    dtype: np.dtype
    wanted: tuple
    kdef: object = None

    def run(self, provider, inputs, output_shapes=None):
        ctx = KernelContext(self.op_type, self.name, inputs, self.attrs, self.wanted,
                            output_shapes or {}, self.dtype, provider)
        results = self.kernel(ctx)
        missing = [w for w in self.wanted if w not in results]
        if missing:
            raise RuntimeError(f"kernel of {self.op_type} did not produce {missing}")
        return [results[w] for w in self.wanted]


def newest_opset(op_type, domain):
    """The opset at which the newest version of an op starts."""
    return get_schema(op_type, domain, None).since_version


def bind_node(op_type, input_types, attrs, *, domain="", opset, provider, wanted=None, node_name=None):
    """Validate a node against its schema and pick its kernel.  Returns (BoundNode, output types)."""
    sch = get_schema(op_type, domain, opset)
    resolved = resolve_attrs(sch, attrs, node_name)
    wanted = tuple(sch.outputs if wanted is None else wanted)
    for name in wanted:
        sch.output_index(name)
    ctx, out_types = infer_node(sch, input_types, resolved, node_name, wanted)
    dtype = ctx.dtype
    if dtype is None:
        present = [t for t in input_types if t is not None]
        dtype = present[0].dtype if present else np.dtype(np.float32)
    kdef, kernel = lookup(op_type, domain, opset, provider.name, dtype)
    return BoundNode(op_type, node_name, sch, resolved, kernel, dtype, wanted, kdef), out_types


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
    arrays = [None if x is None or prov.is_native(x) else np.asarray(x) for x in inputs]
    arrays = [x if a is None else a for x, a in zip(inputs, arrays)]
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
    placed = [None if a is None else _to_host(a) if kdef.input_on_host(i) else prov.as_native(a)
              for i, a in enumerate(arrays)]
    results = bound.run(prov, placed, shapes)
    if native:
        return results
    return [r if isinstance(r, np.ndarray) else prov.to_numpy(r) for r in results]


def _to_host(value):
    """A C-contiguous host (NumPy) array of a value that a kernel reads from host memory."""
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value)
    return np.asarray(value.get()) if hasattr(value, "get") else np.asarray(value)


class Executor:
    """Runs an execution plan (see scheduler.py) on a provider.

    Values are dropped from the environment right after their last consumer has run, so the
    provider can free or reuse their memory.  With `profile=True`, per-node wall times are
    accumulated in `self.profile` (node name -> seconds) and `self.calls`.
    """

    def __init__(self, plan, provider="cpu", profile=False):
        self.plan = plan
        self.provider = get_provider(provider) if isinstance(provider, str) else provider
        self.profile_enabled = profile
        self.profile = {}
        self.calls = 0
        self._bound = {}
        self.constants = {name: self.provider.from_numpy(a) for name, a in plan.graph.initializers.items()}

    def _bind(self, step, env):
        """Bind a step once per input dtypes and shapes (a new batch size re-validates)."""
        node = step.node
        signature = tuple((env[n].dtype, env[n].shape) if n else None for n in node.inputs)
        key = (step.index, signature)
        bound = self._bound.get(key)
        if bound is None:
            types = [TensorType(np.dtype(s[0]), tuple(s[1])) if s else None for s in signature]
            while types and types[-1] is None:
                types.pop()
            wanted = [step.schema_outputs[i] for i, out in enumerate(node.outputs) if out]
            bound, _ = bind_node(node.op_type, types, node.attrs, domain=node.domain,
                                 opset=self.plan.graph.opset(node.domain), provider=self.provider,
                                 wanted=wanted, node_name=node.name)
            self._bound[key] = bound
        return bound

    def run(self, feeds, fetch=None):
        """Run the plan on `feeds` (input name -> array); return a dict of the fetched values
        (default: all that the plan was made for) as NumPy arrays."""
        plan = self.plan
        fetch = list(plan.fetch if fetch is None else fetch)
        extra = [f for f in fetch if f not in plan.fetch]
        if extra:
            raise ValueError(f"cannot fetch {extra}: the plan was scheduled for {plan.fetch}")
        missing = [n for n in plan.graph.input_names if n not in feeds and n in plan.needed_inputs]
        if missing:
            raise ValueError(f"graph {plan.graph.name!r}: no value fed for input(s) {missing}")
        env = dict(self.constants)
        dims = {}
        for value in plan.graph.inputs:
            if value.name in feeds:
                array = np.asarray(feeds[value.name])
                _bind_dims(value, array.shape, dims)
                env[value.name] = self.provider.from_numpy(array)
        keep = set(fetch)
        dims_key = tuple(sorted(dims.items()))
        for step in plan.steps:
            node = step.node
            bound = self._bind(step, env)
            inputs = [env[n] if n else None for n in node.inputs]
            shapes = step.output_shapes(dims, dims_key)
            if self.profile_enabled:
                start = time.perf_counter()
                results = bound.run(self.provider, inputs, shapes)
                self.profile[node.name] = self.profile.get(node.name, 0.0) + time.perf_counter() - start
            else:
                results = bound.run(self.provider, inputs, shapes)
            for name, value in zip((o for o in node.outputs if o), results):
                env[name] = value
            for name in step.frees:
                if name not in keep:
                    env.pop(name, None)
        self.calls += 1
        return {name: self.provider.to_numpy(env[name]) for name in fetch}


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
