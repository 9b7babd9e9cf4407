"""The state of one fusion pass: the graph being rewritten and what the rules ask about it."""
from __future__ import annotations

from ..errors import GraphError
from ..graph import Node
from ..inference import check_graph_node, infer_types
from ..ops.constant import constant_array
from ..ops.schema import FUSED_DOMAIN, ONNX_DOMAIN
from ..providers import provider_list
from ..registry import find


class Rewrite:
    """The graph being rewritten, with what the rules ask about it: types, producers and
    readers of values, the values that must stay, and which provider runs a node."""

    def __init__(self, graph, fetch, providers):
        self.graph = graph.copy()
        self.graph.opset_imports.setdefault(FUSED_DOMAIN, 1)
        self.providers = tuple(provider_list(providers))
        self.kept = set(fetch) | set(graph.outputs)
        self.types = infer_types(self.graph)
        self.refresh()

    def refresh(self):
        """Recompute producers and readers after a rule has changed the nodes."""
        self.producers = self.graph.producers()
        self.readers = self.graph.consumers()

    def readers_of(self, name):
        return self.readers.get(name, [])

    def only_read_by(self, name, node):
        """Whether `node` is the one reader of `name` and nothing keeps it (so a rule may fold
        the value into a fused node)."""
        readers = self.readers_of(name)
        return name not in self.kept and len(readers) == 1 and readers[0] is node

    def constant(self, name):
        """The value called `name` when it is an initializer or a Constant node's output, or None."""
        if name in self.graph.initializers:
            return self.graph.initializers[name]
        node = self.producers.get(name)
        if node is None or (node.op_type, node.domain) != ("Constant", ONNX_DOMAIN):
            return None
        return constant_array(_refuse(node), node.attrs)

    def dtype_of(self, node):
        """The element type a node runs in (its schema's float type)."""
        return check_graph_node(self.graph, node, self.types).dtype

    def kernel_for(self, op_type, domain, dtype):
        """The KernelDef of the first provider with a kernel for this op and dtype, or None."""
        opset = self.graph.opset(domain)
        for provider in self.providers:
            found = find(op_type, domain, opset, provider, dtype)
            if found is not None:
                return found[0]
        return None

    def provider_for(self, op_type, domain, dtype):
        """The first provider with a kernel for this op and dtype, or None."""
        kdef = self.kernel_for(op_type, domain, dtype)
        return None if kdef is None else kdef.provider

    def fuses_on(self, op_type, domain, dtype):
        """The provider whose kernel would run the fused op (op_type, domain), or None where that
        kernel is a reference kernel (registry.register_kernel: no faster than the nodes)."""
        kdef = self.kernel_for(op_type, domain, dtype)
        return None if kdef is None or kdef.reference else kdef.provider

    def can_fuse(self, nodes, op_type, domain):
        """Whether the fused op (op_type, domain) may replace `nodes`: its kernel, not a
        reference one, runs where every one of them runs."""
        target = self.fuses_on(op_type, domain, self.dtype_of(nodes[0]))
        return target is not None and all(
            self.provider_for(n.op_type, n.domain, self.dtype_of(n)) == target for n in nodes)

    def replace(self, old, new):
        """Put `new` (a Node, or None to drop it) where `old` was in the node list."""
        index = next(i for i, n in enumerate(self.graph.nodes) if n is old)
        if new is None:
            del self.graph.nodes[index]
        else:
            self.graph.nodes[index] = new


def _refuse(node):
    """constant_array's `fail` for a Constant node of the graph (one that inference passed)."""
    def fail(message):
        raise GraphError(f"Constant node {node.name!r}: {message}")
    return fail


def fused_node(op_type, domain, inputs, outputs, attrs, parts):
    """The node replacing `parts`, named after them so that a plan shows what it holds."""
    return Node(op_type, inputs, outputs, attrs, domain, "+".join(p.name for p in parts))
