"""Gelu written out in elementwise nodes, as exporters write it for opsets before 20 (which have
no Gelu op) -> one com.microsoft Gelu or FastGelu node, as ONNX Runtime's GeluFusion and
FastGeluFusion rewrite it:

    erf form   0.5 * x * (1 + Erf(x / sqrt(2)))                           -> Gelu(x)
    tanh form  0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))    -> FastGelu(x)

x / sqrt(2) may be Mul(x, 1/sqrt(2)); x^3 is Mul(x, Mul(x, x)) (either way round) or Pow(x, 3);
the product 0.5 * x * (1 + ...) is two Muls grouped any way; every Add and Mul takes its
operands in either order.  Each constant is one element (an initializer or a Constant node) of
no higher rank than x, equal to its value within ONNX Runtime's relative tolerance of 1e-5 (or
the rounding of the value to a 16-bit constant's type).  Every intermediate value has one
reader, the next node of the pattern, and is neither fetched nor a graph output.

TrainingSession applies the rule to the forward graph before the gradient graph is built
(fuse_forward), so that the gradient is one GeluGrad (FastGeluGrad) node where the written-out
form differentiates into a dozen elementwise nodes; it fires only where the fused op and its
gradient op run on the provider that runs the nodes it replaces."""
import numpy as np

from ..ops.schema import MS_DOMAIN, ONNX_DOMAIN
from .rewrite import fused_node

SQRT_2 = float(np.sqrt(2.0))
TANH_SCALE = float(np.sqrt(2.0 / np.pi))
TANH_CUBIC = 0.044715
RELATIVE_TOLERANCE = 1e-5
FUSED = {"Erf": ("Gelu", "GeluGrad"), "Tanh": ("FastGelu", "FastGeluGrad")}


def is_value(rewrite, name, expected, like):
    """Whether `name` is a one-element constant equal to `expected`, of no higher rank than the
    value `like` (so that it broadcasts to like's shape)."""
    value = rewrite.constant(name)
    shape = rewrite.types[like].shape
    if value is None or value.size != 1 or shape is None or value.ndim > len(shape):
        return False
    rounding = abs(float(np.asarray(expected).astype(value.dtype)) - expected)
    return abs(float(value.reshape(-1)[0]) - expected) <= max(RELATIVE_TOLERANCE * abs(expected), rounding)


def operand_beside(rewrite, node, op_type, expected):
    """The other operand of `node` when it is op_type (ONNX) with the constant `expected` as one
    operand (the second only, for Div), else None."""
    if (node.op_type, node.domain) != (op_type, ONNX_DOMAIN) or len(node.inputs) != 2:
        return None
    orders = [node.inputs] if op_type == "Div" else [node.inputs, node.inputs[::-1]]
    for other, constant in orders:
        if is_value(rewrite, constant, expected, other):
            return other
    return None


def sole_reader(rewrite, name):
    """The one node reading `name` when nothing else reads or keeps it, else None."""
    readers = rewrite.readers_of(name)
    return readers[0] if len(readers) == 1 and name not in rewrite.kept else None


def read_only_by(rewrite, name, node):
    """The producer of `name` when `node` is its sole reader, else None."""
    producer = rewrite.producers.get(name)
    return producer if producer is not None and sole_reader(rewrite, name) is node else None


def erf_argument(rewrite, erf):
    """(x, [the Div or Mul]) of Erf(x / sqrt(2)), or None."""
    scale = read_only_by(rewrite, erf.inputs[0], erf)
    if scale is None:
        return None
    x = operand_beside(rewrite, scale, "Div", SQRT_2) or operand_beside(rewrite, scale, "Mul", 1 / SQRT_2)
    return None if x is None else (x, [scale])


def cube_nodes(rewrite, name, x):
    """The nodes computing `name` = x^3 (Mul(x, Mul(x, x)), Pow(x, 3)), or None."""
    cube = rewrite.producers.get(name)
    if cube is None or cube.domain != ONNX_DOMAIN or len(cube.inputs) != 2:
        return None
    if cube.op_type == "Pow":
        return [cube] if cube.inputs[0] == x and is_value(rewrite, cube.inputs[1], 3.0, x) else None
    if cube.op_type != "Mul" or x not in cube.inputs:
        return None
    square = read_only_by(rewrite, cube.inputs[1] if cube.inputs[0] == x else cube.inputs[0], cube)
    if square is None or (square.op_type, square.domain) != ("Mul", ONNX_DOMAIN) or list(square.inputs) != [x, x]:
        return None
    return [square, cube]


def tanh_argument(rewrite, tanh):
    """(x, [its nodes]) of Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)), or None."""
    scale = read_only_by(rewrite, tanh.inputs[0], tanh)
    inner = None if scale is None else operand_beside(rewrite, scale, "Mul", TANH_SCALE)
    add = None if inner is None else read_only_by(rewrite, inner, scale)
    if add is None or (add.op_type, add.domain) != ("Add", ONNX_DOMAIN) or len(add.inputs) != 2:
        return None
    for x, term in (add.inputs, add.inputs[::-1]):
        weighted = read_only_by(rewrite, term, add)
        cubed = None if weighted is None else operand_beside(rewrite, weighted, "Mul", TANH_CUBIC)
        cube = None if cubed is None or sole_reader(rewrite, cubed) is not weighted else cube_nodes(rewrite, cubed, x)
        if cube is not None:
            return x, cube + [weighted, add, scale]
    return None


def half_x_times(rewrite, one_plus, x):
    """([the two Muls], output) of 0.5 * x * one_plus in any grouping, or None."""
    first = sole_reader(rewrite, one_plus)
    if first is None or (first.op_type, first.domain) != ("Mul", ONNX_DOMAIN) or len(first.inputs) != 2:
        return None
    other = first.inputs[1] if first.inputs[0] == one_plus else first.inputs[0]
    half_x = read_only_by(rewrite, other, first)
    if half_x is not None and operand_beside(rewrite, half_x, "Mul", 0.5) == x:     # (0.5 * x) * (1 + f)
        return [half_x, first], first.outputs[0]
    second = sole_reader(rewrite, first.outputs[0])
    if second is None or (second.op_type, second.domain) != ("Mul", ONNX_DOMAIN) or len(second.inputs) != 2:
        return None
    if other == x and operand_beside(rewrite, second, "Mul", 0.5) == first.outputs[0]:   # (x * (1 + f)) * 0.5
        return [first, second], second.outputs[0]
    if is_value(rewrite, other, 0.5, one_plus) and first.outputs[0] in second.inputs and x in second.inputs:
        return [first, second], second.outputs[0]                                        # x * (0.5 * (1 + f))
    return None


def match(rewrite, function):
    """(x, the pattern's nodes, its output) around an Erf or Tanh node, or None."""
    argument = (erf_argument if function.op_type == "Erf" else tanh_argument)(rewrite, function)
    one_plus = sole_reader(rewrite, function.outputs[0])
    if argument is None or one_plus is None or operand_beside(rewrite, one_plus, "Add", 1.0) != function.outputs[0]:
        return None
    x, before = argument
    product = half_x_times(rewrite, one_plus.outputs[0], x)
    if product is None:
        return None
    muls, output = product
    return x, before + [function, one_plus] + muls, output


def apply(rewrite):
    for function in [n for n in rewrite.graph.nodes if n.op_type in FUSED and n.domain == ONNX_DOMAIN]:
        found = match(rewrite, function)
        if found is None:
            continue
        x, nodes, output = found
        op, grad_op = FUSED[function.op_type]
        dtype = rewrite.dtype_of(function)
        if not rewrite.can_fuse(nodes, op, MS_DOMAIN) or (rewrite.fuses_on(grad_op, MS_DOMAIN, dtype)
                                                          != rewrite.fuses_on(op, MS_DOMAIN, dtype)):
            continue
        last = next(n for n in nodes if n.outputs[0] == output)
        rewrite.replace(last, fused_node(op, MS_DOMAIN, [x], [output], {}, nodes))
        for node in nodes:
            if node is not last:
                rewrite.replace(node, None)
        rewrite.refresh()
