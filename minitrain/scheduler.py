"""Execution plans: which provider runs each node, node order, tensor lifetimes and the
planned peak memory.

`schedule` prunes the nodes that no fetched value depends on, orders the rest topologically
(iteratively: a chain of thousands of nodes is fine), validates each node once and binds it to
a kernel, and records for every value the step of its last use, listing at each step the
values to free right after it.  The executor drops those values from its environment, so the
provider can free or reuse their buffers.

Providers are assigned as ONNX Runtime assigns them: the session's ordered provider list (for
example ["cuda", "cpu"]) is tried in order and each node runs on the first provider with a
kernel for it.  Every value then has a location: the provider whose memory holds it (host
memory is the location of the provider whose `host_memory` is set, the CPU's, which is also
where host-resident kernel inputs and outputs live).  Where a consumer needs a value in another
location, the plan holds an explicit copy node (MemcpyFromHost or MemcpyToHost, run by the
device provider) before the consumer.

Constant nodes, and the cheap nodes computed from constants only, are folded while planning
(constant_folding.py, from Constant nodes alone): the plan holds their values in `constants`,
placed like initializers, and no step for them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .binding import bind
from .caches import LRUCache
from .constant_folding import fold_node
from .errors import GraphError, KernelNotFoundError
from .graph import Node
from .inference import check_graph_node, initializer_type, topological_order
from .ops.schema import describe_op, get_schema
from .providers import get_provider, provider_list
from .tensor_limit import check_tensor_bytes


@dataclass
class Step:
    """One node of the plan: its bound kernel, the provider that runs it, and the values whose
    last use it is."""
    index: int
    node: object
    schema_outputs: tuple
    out_types: list
    frees: tuple
    provider: str
    bound: object
    _shape_cache: LRUCache = field(default_factory=lambda: LRUCache("step output shapes"), repr=False,
                                   compare=False)
    _last_shapes: tuple = field(default=(None, None), repr=False, compare=False)   # (key, shapes) of the last call

    def output_shapes(self, dims, key=None):
        """Shapes of this node's outputs that the graph knows, with symbolic dims bound by
        `dims` (what the kernel would otherwise have to guess, e.g. a pooling gradient's dX);
        `key` is the hashable form of dims, when the caller has it.  A shape beyond the tensor
        limit fails here, before the kernel allocates (minitrain/tensor_limit.py)."""
        key = tuple(sorted(dims.items())) if key is None else key
        last_key, shapes = self._last_shapes       # a training loop asks for the same dims every step
        if last_key == key:
            return shapes
        shapes = self._shape_cache.get(key)
        if shapes is None:
            shapes = {}
            for i, (name, t) in enumerate(zip(self.node.outputs, self.out_types)):
                if name and t is not None and t.shape is not None:
                    concrete = tuple(dims.get(d, d) if isinstance(d, str) else d for d in t.shape)
                    if all(isinstance(d, int) for d in concrete):
                        check_tensor_bytes(describe_op(self.node.op_type, self.node.name), self.schema_outputs[i],
                                           concrete, t.dtype, self.node.attrs)
                        shapes[self.schema_outputs[i]] = concrete
            self._shape_cache.put(key, shapes)
        self._last_shapes = (key, shapes)
        return shapes


@dataclass
class Plan:
    graph: object
    steps: list
    types: dict
    fetch: list
    needed_inputs: set
    last_use: dict
    providers: tuple
    locations: dict
    constants: dict = field(default_factory=dict)   # folded value name -> array (constant_folding.py)

    def free_step(self, name):
        """Index of the step after which `name` is dropped (None: kept to the end)."""
        for step in self.steps:
            if name in step.frees:
                return step.index
        return None

    def placement(self):
        """(node name, op type, provider) of every step, in order."""
        return [(s.node.name, s.node.op_type, s.provider) for s in self.steps]

    def describe(self):
        """The plan as text: one line per step with the provider it runs on."""
        lines = [f"plan of graph {self.graph.name!r} on {list(self.providers)}: {len(self.steps)} steps"]
        for s in self.steps:
            lines.append(f"  {s.index:4d} {s.provider:5s} {s.node.op_type:28s} {s.node.name}")
        return "\n".join(lines)

    def peak_bytes(self, dims=None):
        """Planned peak of the bytes held by node outputs (graph inputs and initializers are
        the caller's), simulating allocation at each step and freeing at last use.  Views
        (Reshape, Identity) count as copies, so this is an upper bound.  Values whose shape
        stays unknown count as 0."""
        dims = dims or {}
        live = peak = 0
        sizes = {}
        for step in self.steps:
            for name, t in zip(step.node.outputs, step.out_types):
                size = _bytes(t, dims)
                if name and size is not None:
                    sizes[name] = size
                    live += size
            peak = max(peak, live)
            for name in step.frees:
                live -= sizes.pop(name, 0)
        return peak

    def total_bytes(self, dims=None):
        """Sum of the sizes of every node output: what running without freeing would hold."""
        dims = dims or {}
        return sum(_bytes(t, dims) or 0 for step in self.steps for name, t in zip(step.node.outputs, step.out_types)
                   if name)


def _bytes(t, dims):
    if t is None or t.shape is None:
        return None
    shape = [dims.get(d, d) if isinstance(d, str) else d for d in t.shape]
    if not all(isinstance(d, int) for d in shape):
        return None
    size = t.dtype.itemsize
    for d in shape:
        size *= d
    return size


def _bind(graph, node, checked, providers):
    """The validated `node` of `graph` bound on the first of `providers` with a kernel for it."""
    return bind(checked, node.op_type, domain=node.domain, opset=graph.opset(node.domain), providers=providers,
                node_name=node.name)


def schedule(graph, fetch=None, providers="cpu"):
    """Plan the run of `graph` producing `fetch` (default: the graph outputs) on the ordered
    `providers` (a list of names, or one device name: "cuda" means ["cuda", "cpu"])."""
    providers = tuple(provider_list(providers))
    fetch = list(graph.outputs if fetch is None else fetch)
    order = topological_order(graph, rank=lambda node: _placement_rank(graph, node))
    unknown = [f for f in fetch if f not in graph.all_value_names()]
    if unknown:
        raise GraphError(f"graph {graph.name!r} cannot produce {unknown}: no such value")
    needed = set(fetch)
    kept = []
    for node in reversed(order):
        if any(o in needed for o in node.outputs if o):
            kept.append(node)
            needed.update(x for x in node.inputs if x)
    kept.reverse()

    types = {v.name: v.type for v in graph.inputs}
    types.update({name: initializer_type(a) for name, a in graph.initializers.items()})
    kept_ids = {id(n) for n in kept}
    bound_steps = []
    constants = {}
    for node in order:
        checked = check_graph_node(graph, node, types)
        kept_node = id(node) in kept_ids
        folded = fold_node(node, graph.opset(node.domain), constants) if kept_node else None
        if folded is not None:
            for name, array in zip((o for o in node.outputs if o), folded):
                constants[name] = array
                types[name] = initializer_type(array)
            continue
        out_types = []
        for name, t in zip(node.outputs, checked.out_types):
            declared = graph.value_info.get(name) if name else None
            if t.shape is None and declared is not None:
                t = type(t)(t.dtype, declared.shape)
            out_types.append(t)
            if name:
                types[name] = t
        if kept_node:
            bound_steps.append((node, _bind(graph, node, checked, providers), out_types))

    read = {name for node, _, _ in bound_steps for name in node.inputs}
    constants = {name: array for name, array in constants.items() if name in read or name in fetch}
    locations, nodes = _place(graph, bound_steps, providers, types, constants)
    persistent = set(graph.initializers) | set(constants) | set(fetch)
    last_use = {}
    for index, (node, _, _) in enumerate(nodes):
        for name in list(node.outputs) + list(node.inputs):
            if name:
                last_use[name] = index      # an output nobody reads dies right away
    frees = {}
    for name, index in last_use.items():
        if name not in persistent:
            frees.setdefault(index, []).append(name)
    steps = [Step(index, node, bound.schema.outputs, out_types, tuple(frees.get(index, ())),
                  bound.kdef.provider, bound) for index, (node, bound, out_types) in enumerate(nodes)]
    needed_inputs = {n for n in graph.input_names if n in needed}
    return Plan(graph, steps, types, fetch, needed_inputs, last_use, providers, locations, constants)


PLACEMENT_RANK = {"early": -1, None: 0, "late": 1}


def _placement_rank(graph, node):
    """Where `node` goes among the nodes ready to run (lowest first): its op's placement
    (ops/schema.py), so that a collective launches as soon as its inputs exist and the compute
    after it overlaps it, and its wait comes after that compute.  A node of an unknown op
    ranks as any other: the node checks that follow report it."""
    try:
        return PLACEMENT_RANK[get_schema(node.op_type, node.domain, graph.opset(node.domain)).placement]
    except (GraphError, KernelNotFoundError):
        return PLACEMENT_RANK[None]


def _place(graph, bound_steps, providers, types, constants):
    """Locations of every value, and the steps with copy nodes inserted before the consumers
    that need a value in another provider's memory (their types are added to `types`).
    Graph inputs, initializers and the folded `constants` live on the device when a device
    kernel reads them, else in host memory; a constant read in both gets a copy of its own in
    host memory (added to `constants`)."""
    in_host_memory = {name: get_provider(name).host_memory for name in providers}
    host = next((name for name in providers if in_host_memory[name]), None)
    if host is None:
        raise ValueError(f"providers {list(providers)}: none keeps its values in host memory, where graph inputs, "
                         "initializers and host-resident kernel values live; add 'cpu'")
    device = next((name for name in providers if not in_host_memory[name]), host)
    wants = {}
    for node, bound, _ in bound_steps:
        for i, name in enumerate(node.inputs):
            if name:
                wants.setdefault(name, set()).add(host if bound.kdef.input_on_host(i) else bound.kdef.provider)
    locations = {}
    for name in list(graph.input_names) + list(graph.initializers) + list(constants):
        wanted = wants.get(name, {host})
        locations[name] = device if device in wanted else host
    for node, bound, _ in bound_steps:
        for name, out in zip(node.outputs, bound.schema.outputs):
            if name:
                locations[name] = host if bound.kdef.output_on_host(out) else bound.kdef.provider
    if device == host:
        return locations, bound_steps
    copies = {}
    steps = []
    for node, bound, out_types in bound_steps:
        inputs = list(node.inputs)
        for i, name in enumerate(inputs):
            if not name:
                continue
            target = host if bound.kdef.input_on_host(i) else bound.kdef.provider
            if locations[name] == target:
                continue
            if (name, target) not in copies:
                copied = f"{name}@{target}"
                if name in constants:       # a second constant in the other memory, not a copy per run
                    constants[copied] = constants[name]
                    types[copied] = types[name]
                else:
                    op = "MemcpyToHost" if target == host else "MemcpyFromHost"
                    copy = Node(op, [name], [copied], {}, "", f"{op}({name})")
                    checked = check_graph_node(graph, copy, types)
                    runs_on = locations[name] if target == host else target
                    steps.append((copy, _bind(graph, copy, checked, (runs_on,)), list(checked.out_types)))
                    types[copied] = checked.out_types[0]
                locations[copied] = target
                copies[(name, target)] = copied
            inputs[i] = copies[(name, target)]
        if inputs != list(node.inputs):
            node = Node(node.op_type, inputs, node.outputs, node.attrs, node.domain, node.name)
        steps.append((node, bound, out_types))
    return locations, steps

