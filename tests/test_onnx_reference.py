"""Every forward op of the ONNX domain against onnx.reference.ReferenceEvaluator.

The ops come from the registry (ONNX-domain CPU kernels), so a new op without cases here fails
test_every_forward_op_has_cases instead of going unchecked.  Each kernel version range is run
at its first opset and at the newest one it serves, on one-node ONNX models built with
onnx.helper, over several attribute combinations per op, in float32 and float64.

ONNX stores float attributes as float32, so the cases give theirs as float32 values (minitrain
keeps the Python float it is given), and a case that leaves a float attribute at its default
runs in float32 only, where the two defaults agree within the tolerance.

Where ONNX's reference implementation departs from the ONNX operator spec, the spec wins: the
reference is then run on an equivalent model the reference gets right (reference_outputs says
which and why)."""
import math
import zlib
from dataclasses import dataclass, field

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from minitrain import DEFAULT_OPSETS, registered_kernels, run_node  # noqa: E402

# ONNX Runtime's pool gradients, which it registers in the ONNX domain at version 9; ONNX has
# no such ops (checked below), so there is nothing to compare them with.
NOT_IN_ONNX = {"MaxPoolGrad", "AveragePoolGrad"}
NEWEST = DEFAULT_OPSETS[""]
# NaN, infinities and zero divisors are inputs here on purpose; NumPy's warnings about them are not news.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
TOLERANCE = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-10}


@dataclass
class Case:
    """One node: inputs (None for an absent optional input), attributes, and the minitrain
    outputs compared, in the order of ONNX's outputs (None: all of the op's outputs)."""
    inputs: list
    attrs: dict = field(default_factory=dict)
    outputs: tuple = None


def forward_kernels():
    """(op_type, opset) pairs to check: the first and the last opset of every ONNX-domain CPU
    kernel's version range (an open range ends at NEWEST, or at its first opset when that is
    newer)."""
    pairs = set()
    for k in registered_kernels():
        if k.domain == "" and k.provider == "cpu" and k.op_type not in NOT_IN_ONNX:
            pairs.add((k.op_type, k.since_version))
            pairs.add((k.op_type, max(NEWEST, k.since_version) if k.end_version is None else k.end_version))
    return sorted(pairs)


# --------------------------------------------------------------------------- cases per op
def _normal(rng, dtype, *shape):
    return rng.standard_normal(shape).astype(dtype)


def _away_from_zero(rng, dtype, *shape):
    x = rng.standard_normal(shape)
    return (x + np.copysign(0.5, x)).astype(dtype)


def _with_specials(rng, dtype, *shape):
    """Random values with NaN, +-inf and large magnitudes among them."""
    x = rng.standard_normal(shape) * 3
    x.flat[:5] = [np.nan, np.inf, -np.inf, 80.0, -80.0]
    return x.astype(dtype)


def binary_cases(op):
    def cases(rng, dtype, opset):
        make = _away_from_zero if op == "Div" else _normal
        shapes = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((3, 1, 5), (1, 4, 1)), ((), (2, 3)), ((2, 3), ())]
        cases = [Case([_normal(rng, dtype, *a), make(rng, dtype, *b)]) for a, b in shapes]
        specials = np.array([0.0, -0.0, 1.0, np.inf, np.nan], dtype=dtype)
        return cases + [Case([specials[:, None], specials])]
    return cases


def sum_cases(rng, dtype, opset):
    return [Case([_normal(rng, dtype, 2, 3)]),
            Case([_normal(rng, dtype, 2, 3, 4), _normal(rng, dtype, 4), _normal(rng, dtype, 3, 1)])]


def unary_cases(rng, dtype, opset):
    return [Case([_with_specials(rng, dtype, 3, 4, 5)]), Case([_normal(rng, dtype)])]


def leaky_relu_cases(rng, dtype, opset):
    x = _with_specials(rng, dtype, 3, 4, 5)
    default = [Case([x])] if dtype == np.float32 else []
    return default + [Case([x], {"alpha": 0.01}), Case([x], {"alpha": 0.2}), Case([x], {"alpha": -0.5}),
                      Case([x], {"alpha": 0.0})]


def softmax_cases(rng, dtype, opset):
    x = (_normal(rng, dtype, 2, 3, 4) * 5).astype(dtype)
    x[0, 0, :2] = -np.inf
    return [Case([x])] + [Case([x], {"axis": a}) for a in (0, 1, 2, -1, -2, -3)]


def _conv_sample(rng, dtype, spatial, c_in, c_out, kernel, group):
    return [_normal(rng, dtype, 2, c_in, *spatial), _normal(rng, dtype, c_out, c_in // group, *kernel)]


def conv_cases(rng, dtype, opset):
    cases = []
    for spatial, kernel in (((9,), (3,)), ((7, 6), (3, 2)), ((5, 4, 6), (2, 3, 2))):
        n = len(spatial)
        x, w = _conv_sample(rng, dtype, spatial, 4, 6, kernel, 1)
        xg, wg = _conv_sample(rng, dtype, spatial, 4, 6, kernel, 2)
        b = _normal(rng, dtype, 6)
        cases += [
            Case([x, w]),
            Case([x, w, b], {"pads": [1] * n + [0] * n, "strides": [2] * n}),
            Case([x, w, b], {"dilations": [2] * n, "pads": [2] * (2 * n), "kernel_shape": list(kernel)}),
            Case([xg, wg, b], {"group": 2, "strides": [1] * (n - 1) + [3], "pads": [0] * (2 * n - 1) + [2]}),
            Case([x, w], {"auto_pad": "SAME_UPPER", "strides": [2] * n}),
            Case([x, w], {"auto_pad": "SAME_LOWER", "strides": [2] * n}),
            Case([x, w, b], {"auto_pad": "VALID", "strides": [1] * (n - 1) + [2], "dilations": [2] + [1] * (n - 1)}),
            Case([x, w], {"auto_pad": "SAME_LOWER", "strides": [3] * n, "dilations": [2] * n}),
            Case([x, w], {"pads": [0] * n + [3] * n, "strides": [3] * n, "dilations": [1] * (n - 1) + [2]}),
        ]
    depthwise = [_normal(rng, dtype, 2, 4, 6, 5), _normal(rng, dtype, 8, 1, 3, 3)]
    return cases + [Case(depthwise, {"group": 4, "pads": [1, 1, 1, 1]})]


def conv_transpose_cases(rng, dtype, opset):
    cases = []
    for spatial, kernel in (((5,), (3,)), ((4, 3), (3, 2)), ((3, 2, 3), (2, 3, 2))):
        n = len(spatial)
        x = _normal(rng, dtype, 2, 4, *spatial)
        w = _normal(rng, dtype, 4, 3, *kernel)
        b = _normal(rng, dtype, 3)
        wg = _normal(rng, dtype, 4, 2, *kernel)
        cases += [
            Case([x, w]),
            Case([x, w, b], {"strides": [2] * n, "pads": [1] * n + [0] * n, "output_padding": [1] * n}),
            Case([x, w, b], {"strides": [3] * n, "dilations": [2] * n, "pads": [0] * n + [2] * n}),
            Case([x, wg], {"group": 2, "strides": [2] * n}),
            Case([x, w], {"strides": [2] * n, "output_shape": [2 * s + 1 for s in spatial]}),
            Case([x, w, b], {"auto_pad": "SAME_UPPER", "strides": [2] * n}),
            Case([x, w, b], {"auto_pad": "SAME_LOWER", "strides": [2] * n}),
            Case([x, w], {"auto_pad": "VALID", "strides": [2] * n, "kernel_shape": list(kernel)}),
            Case([x, w], {"auto_pad": "SAME_LOWER", "strides": [3] * n, "dilations": [2] * n}),
            Case([x, w], {"strides": [3] * n, "output_padding": [2] * n, "output_shape": [3 * s for s in spatial]}),
            Case([x, w, b], {"strides": [2] * n, "dilations": [3] * n, "output_padding": [1] * n,
                             "pads": [2] * n + [1] * n}),
        ]
    return cases


def max_pool_cases(rng, dtype, opset):
    x2 = _normal(rng, dtype, 2, 3, 7, 6)
    x2[0, 0, :2, :2] = 1.5                  # ties: the first maximum wins
    outputs = ("Y",) if opset < 8 else ("Y", "Indices")
    cases = [Case([x2], {"kernel_shape": [3, 2]}, outputs),
             Case([x2], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, outputs),
             Case([x2], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 0]}, outputs),
             Case([x2], {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [0, 1, 1, 1]}, outputs),
             Case([x2], {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"}, outputs),
             Case([x2], {"kernel_shape": [3, 2], "strides": [2, 3], "auto_pad": "VALID"}, outputs),
             Case([x2], {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER"}, outputs),
             Case([_normal(rng, dtype, 2, 3, 9)], {"kernel_shape": [3], "strides": [2]}, outputs),
             Case([_normal(rng, dtype, 1, 2, 5, 4, 5)], {"kernel_shape": [2, 2, 3], "strides": [2, 1, 2]}, outputs)]
    if opset >= 8:
        cases.append(Case([x2], {"kernel_shape": [3, 2], "strides": [2, 2], "storage_order": 1}, outputs))
    if opset >= 10:
        cases += [Case([x2], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, outputs),
                  Case([x2], {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 0], "ceil_mode": 1},
                       outputs),
                  Case([x2], {"kernel_shape": [2, 2], "strides": [1, 2], "dilations": [2, 2]}, outputs),
                  Case([x2], {"kernel_shape": [2, 2], "strides": [2, 2], "dilations": [2, 1], "ceil_mode": 1,
                              "pads": [1, 1, 0, 1]}, outputs)]
    return cases


def average_pool_cases(rng, dtype, opset):
    x2 = _normal(rng, dtype, 2, 3, 7, 6)
    cases = [Case([x2], {"kernel_shape": [3, 2]}),
             Case([x2], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 0]}),
             Case([x2], {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
             Case([x2], {"kernel_shape": [3, 2], "strides": [2, 3], "auto_pad": "VALID"}),
             Case([_normal(rng, dtype, 2, 3, 9)], {"kernel_shape": [3], "strides": [2]}),
             Case([_normal(rng, dtype, 1, 2, 5, 4, 5)], {"kernel_shape": [2, 2, 3], "strides": [2, 1, 2]})]
    if opset >= 7:
        cases += [Case([x2], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 0],
                              "count_include_pad": 1})]
        cases += [Case([x2], {"kernel_shape": [3, 2], "strides": [2, 1], "auto_pad": pad, "count_include_pad": 1})
                  for pad in ("SAME_UPPER", "SAME_LOWER")]
    if opset >= 10:
        cases += [Case([x2], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
                  Case([x2], {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 0], "ceil_mode": 1,
                              "count_include_pad": 1}),
                  Case([x2], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1,
                              "count_include_pad": 1}),
                  Case([x2], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1})]
    if opset >= 19:
        cases.append(Case([x2], {"kernel_shape": [2, 2], "strides": [1, 2], "dilations": [2, 2]}))
    return cases


def global_pool_cases(rng, dtype, opset):
    return [Case([_normal(rng, dtype, *shape)]) for shape in ((2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 4, 2))]


def batch_norm_cases(rng, dtype, opset):
    """From version 14 only: ONNX's reference of version 9 fills in momentum's default and so
    always normalises with updated running statistics (test_onnx_import_state.py checks
    version 9 against PyTorch)."""
    if opset < 14:
        return []
    cases = []
    for shape in ((4, 3), (2, 3, 5), (2, 3, 4, 5), (2, 3, 2, 3, 2)):
        x = _normal(rng, dtype, *shape)
        stats = [_normal(rng, dtype, 3), _normal(rng, dtype, 3), _normal(rng, dtype, 3),
                 (rng.random(3) + 0.5).astype(dtype)]
        cases += [Case([x, *stats], {"epsilon": 1e-3}, ("Y",)),
                  Case([x, *stats], {"training_mode": 1, "momentum": 0.9, "epsilon": 1e-5},
                       ("Y", "running_mean", "running_var")),
                  Case([x, *stats], {"training_mode": 1, "momentum": 0.6, "epsilon": 0.01},
                       ("Y", "running_mean", "running_var"))]
    if dtype == np.float32:
        cases += [Case(cases[0].inputs, {}, ("Y",)),
                  Case(cases[0].inputs, {"training_mode": 1}, ("Y", "running_mean", "running_var"))]
    return cases


# per-sample normalisations
def layer_norm_cases(rng, dtype, opset):
    x = _normal(rng, dtype, 2, 3, 4)
    return [Case([x, _normal(rng, dtype, 4), _normal(rng, dtype, 4)], {"epsilon": 1e-3}),
            Case([x, _normal(rng, dtype, 3, 4), None], {"axis": 1}),
            Case([x, _normal(rng, dtype, 2, 3, 4), _normal(rng, dtype, 2, 3, 4)], {"axis": -3, "epsilon": 1e-2}),
            Case([_normal(rng, dtype, 5, 6), _normal(rng, dtype, 6), _normal(rng, dtype, 6)], {}, ("Y",))]


def instance_norm_cases(rng, dtype, opset):
    return [Case([_normal(rng, dtype, *shape), _normal(rng, dtype, shape[1]), _normal(rng, dtype, shape[1])],
                 {"epsilon": 1e-3}, ("output",)) for shape in ((2, 3, 5), (2, 3, 4, 5), (1, 2, 2, 3, 2))]


def group_norm_cases(rng, dtype, opset):
    """Scale and bias per group (version 18; 21 makes them per channel, past NEWEST)."""
    return [Case([_normal(rng, dtype, *shape), _normal(rng, dtype, groups), _normal(rng, dtype, groups)],
                 {"num_groups": groups, "epsilon": 1e-3}, ("Y",))
            for shape, groups in (((2, 6, 5), 3), ((2, 4, 3, 3), 2), ((2, 4, 3), 4), ((1, 4, 2, 2, 2), 1))]


def gemm_cases(rng, dtype, opset):
    cases = []
    for ta in (0, 1):
        for tb in (0, 1):
            a = _normal(rng, dtype, *((4, 3) if ta else (3, 4)))
            b = _normal(rng, dtype, *((5, 4) if tb else (4, 5)))
            cases.append(Case([a, b, _normal(rng, dtype, 5)], {"transA": ta, "transB": tb, "alpha": 0.7, "beta": 1.5}))
    a, b = _normal(rng, dtype, 3, 4), _normal(rng, dtype, 4, 5)
    cases += [Case([a, b, _normal(rng, dtype, *c)], {"beta": 0.5}) for c in ((), (1,), (3, 1), (1, 5), (3, 5))]
    cases.append(Case([a.T.copy(), b, _normal(rng, dtype, 3, 1)], {"transA": 1, "alpha": -1.5, "beta": 0.0}))
    if opset >= 11:
        cases.append(Case([a, b, None], {"alpha": 2.0}))
    return cases


def matmul_cases(rng, dtype, opset):
    shapes = [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
              ((2, 1, 3, 4), (5, 4, 2)), ((1, 3, 4), (2, 4, 5))]
    return [Case([_normal(rng, dtype, *a), _normal(rng, dtype, *b)]) for a, b in shapes]


def flatten_cases(rng, dtype, opset):
    x = _normal(rng, dtype, 2, 3, 4)
    axes = [0, 1, 2, 3] + ([-1, -2, -3] if opset >= 11 else [])
    return [Case([x])] + [Case([x], {"axis": a}) for a in axes] + [Case([_normal(rng, dtype, 2, 0, 4)], {"axis": 1})]


def reshape_cases(rng, dtype, opset):
    x = _normal(rng, dtype, 2, 3, 4)
    targets = ([4, -1], [0, -1], [-1], [2, 0, 2, 2], [0, 0, 4], [24, 1, 1])
    cases = [Case([x, np.array(t, dtype=np.int64)]) for t in targets]
    if opset >= 14:
        empty = _normal(rng, dtype, 0, 4)
        cases += [Case([x, np.array([4, 0, -1], dtype=np.int64)], {"allowzero": 0}),
                  Case([empty, np.array([4, 0], dtype=np.int64)], {"allowzero": 1})]
    return cases


def identity_cases(rng, dtype, opset):
    return [Case([_normal(rng, dtype, 2, 3)]), Case([_normal(rng, dtype)])]


def shape_cases(rng, dtype, opset):
    x = _normal(rng, dtype, 2, 3, 4, 5)
    cases = [Case([x]), Case([_normal(rng, dtype)])]
    if opset >= 15:
        cases += [Case([x], {"start": s, "end": e}) for s, e in ((1, None), (-2, None), (0, -1), (1, 3), (-9, 9),
                                                                  (3, 1))]
        for case in cases:
            case.attrs = {k: v for k, v in case.attrs.items() if v is not None}
    return cases


def transpose_cases(rng, dtype, opset):
    x = _normal(rng, dtype, 2, 3, 4)
    return [Case([x]), Case([x], {"perm": [1, 0, 2]}), Case([x], {"perm": [2, 0, 1]}),
            Case([_normal(rng, dtype, 3)], {"perm": [0]})]


def dropout_cases(rng, dtype, opset):
    x = _normal(rng, dtype, 3, 4)
    ratio = np.array(0.3, dtype=dtype)
    return [Case([x]), Case([x], outputs=("output",)), Case([x, ratio]),
            Case([x, ratio, np.array(False)], {"seed": 3}),
            Case([x, np.array(0.0, dtype=dtype), np.array(True)])]


def sce_cases(rng, dtype, opset):
    cases = []
    for shape in ((5, 4), (2, 4, 3), (2, 4, 2, 3)):
        scores = (_normal(rng, dtype, *shape) * 3).astype(dtype)
        labels = rng.integers(0, 4, (shape[0],) + shape[2:]).astype(np.int64)
        weights = (rng.random(4) + 0.1).astype(dtype)
        for reduction in ("mean", "sum", "none"):
            cases += [Case([scores, labels], {"reduction": reduction}),
                      Case([scores, labels, weights], {"reduction": reduction}),
                      Case([scores, labels, weights], {"reduction": reduction, "ignore_index": 2}),
                      Case([scores, labels], {"reduction": reduction, "ignore_index": 1}, ("output",))]
        cases.append(Case([scores, np.full_like(labels, 3)], {"ignore_index": 3}))
        negative = labels.copy()
        negative.flat[::2] = -1
        cases.append(Case([scores, negative], {"ignore_index": -1}))
        cases.append(Case([scores, negative, weights], {"ignore_index": -1, "reduction": "sum"}))
    return cases


def reduce_sum_cases(rng, dtype, opset):
    """Axes as the attribute up to opset 12, as the int64 input from 13."""
    x = _normal(rng, dtype, 2, 3, 4)
    axes_cases = [None, [1], [-1], [0, 2], [2, 0, 1]]
    cases = []
    for axes in axes_cases:
        for keepdims in (None, 0, 1):
            attrs = {} if keepdims is None else {"keepdims": keepdims}
            if opset < 13:
                cases.append(Case([x], {**attrs, **({} if axes is None else {"axes": axes})}))
            else:
                cases.append(Case([x] if axes is None else [x, np.array(axes, dtype=np.int64)], attrs))
    if opset >= 13:
        empty = np.array([], dtype=np.int64)
        cases += [Case([x, empty]), Case([x, empty], {"noop_with_empty_axes": 1}),
                  Case([x], {"noop_with_empty_axes": 1, "keepdims": 0}),
                  Case([x, np.array([1], dtype=np.int64)], {"noop_with_empty_axes": 1})]
    return cases + [Case([_normal(rng, dtype, 5)], {"keepdims": 0})]


def positive_unary_cases(rng, dtype, opset):
    """Log and Sqrt: positive values, with 0, a negative, +inf and NaN among them."""
    x = np.abs(_normal(rng, dtype, 3, 4, 5)) + dtype.type(0.01)
    x.flat[:4] = [0.0, -1.0, np.inf, np.nan]
    return [Case([x]), Case([np.array(2.5, dtype=dtype)])]


def pow_cases(rng, dtype, opset):
    base = np.abs(_normal(rng, dtype, 2, 3, 4)) + dtype.type(0.1)
    return [Case([base, _normal(rng, dtype, 4)]), Case([base, np.array(2.0, dtype=dtype)]),
            Case([_normal(rng, dtype, 3, 1), np.array([2.0, 3.0, 0.5], dtype=dtype)]),
            Case([np.array([0.0, -2.0, 4.0], dtype=dtype), np.array(0.5, dtype=dtype)])]


def reduce_cases(rng, dtype, opset, axes_input_since):
    """Axes as the attribute before `axes_input_since`, as the int64 input from it."""
    x = _normal(rng, dtype, 2, 3, 4)
    x[1, 1, :2] = x[1, 1, 3]                # ties for ReduceMax
    cases = []
    for axes in (None, [1], [-1], [0, 2]):
        for keepdims in (None, 0, 1):
            attrs = {} if keepdims is None else {"keepdims": keepdims}
            if opset < axes_input_since:
                cases.append(Case([x], {**attrs, **({} if axes is None else {"axes": axes})}))
            else:
                cases.append(Case([x] if axes is None else [x, np.array(axes, dtype=np.int64)], attrs))
    if opset >= axes_input_since:
        cases.append(Case([x, np.array([], dtype=np.int64)], {"noop_with_empty_axes": 1}))
    return cases


def clip_cases(rng, dtype, opset):
    x = _with_specials(rng, dtype, 3, 4)
    if opset < 11:
        return [Case([x], {"min": -0.5, "max": 0.75}), Case([x], {"min": -1.0}), Case([x], {"max": 0.25})]
    low, high = np.array(-0.5, dtype=dtype), np.array(0.75, dtype=dtype)
    return [Case([x, low, high]), Case([x, low]), Case([x, None, high]), Case([x]), Case([x, high, low])]


def where_cases(rng, dtype, opset):
    return [Case([rng.random((3, 4)) > 0.5, _normal(rng, dtype, 3, 4), _normal(rng, dtype, 3, 4)]),
            Case([rng.random((3, 1)) > 0.5, _normal(rng, dtype, 4), _normal(rng, dtype, 2, 3, 4)])]


def slice_cases(rng, dtype, opset):
    x = _normal(rng, dtype, 4, 5, 6)
    specs = [([1], [3], None, None), ([1, -1], [3, -4], [0, 2], None), ([-100], [100], [1], None),
             ([0, 1], [2, 3], None, None)]
    if opset >= 10:
        specs += [([1, -1], [3, 0], [0, 2], [1, -2]), ([5], [-7], [2], [-1]), ([0], [5], [-2], [2])]
    cases = []
    for starts, ends, axes, steps in specs:
        if opset < 10:
            cases.append(Case([x], {"starts": starts, "ends": ends, **({} if axes is None else {"axes": axes})}))
        else:
            index = [np.array(v, dtype=np.int64) for v in (starts, ends)]
            index += [None if v is None else np.array(v, dtype=np.int64) for v in (axes, steps)]
            while index[-1] is None:
                index.pop()
            cases.append(Case([x] + index))
    return cases


def one_hot_cases(rng, dtype, opset):
    indices = np.array([[0, 2], [3, 1]], dtype=np.int64)
    if opset >= 11:
        indices = np.array([[0, -1], [3, -4]], dtype=np.int64)
    depth, values = np.array(4, dtype=np.int64), np.array([-1.5, 2.0], dtype=dtype)
    return [Case([indices, depth, values]), Case([indices, depth, values], {"axis": 0}),
            Case([indices, depth, values], {"axis": 1})]


def nll_cases(rng, dtype, opset):
    cases = []
    for shape in ((5, 4), (2, 4, 3)):
        log_prob = _normal(rng, dtype, *shape)
        target = rng.integers(0, 4, (shape[0],) + shape[2:]).astype(np.int64)
        weight = (rng.random(4) + 0.1).astype(dtype)
        for reduction in ("mean", "sum", "none"):
            cases += [Case([log_prob, target], {"reduction": reduction}),
                      Case([log_prob, target, weight], {"reduction": reduction, "ignore_index": 2})]
    return cases


def unsqueeze_cases(rng, dtype, opset):
    x = _normal(rng, dtype, 2, 3)
    axes_list = [[0], [2], [0, 3], [1, 3]] + ([[-1], [-1, 0]] if opset >= 11 else [])
    if opset < 13:
        return [Case([x], {"axes": axes}) for axes in axes_list]
    return [Case([x, np.array(axes, dtype=np.int64)]) for axes in axes_list]


def squeeze_cases(rng, dtype, opset):
    x = _normal(rng, dtype, 2, 1, 3, 1)
    axes_list = [[1], [1, 3]] + ([[-1]] if opset >= 11 else [])
    if opset < 13:
        return [Case([x])] + [Case([x], {"axes": axes}) for axes in axes_list]
    return [Case([x])] + [Case([x, np.array(axes, dtype=np.int64)]) for axes in axes_list]


def expand_cases(rng, dtype, opset):
    shapes = [((3, 1), (2, 3, 4)), ((3, 4), (4,)), ((2, 1, 4), (1, 3, 1)), ((), (2, 2))]
    return [Case([_normal(rng, dtype, *a), np.array(b, dtype=np.int64)]) for a, b in shapes]


def size_cases(rng, dtype, opset):
    return [Case([_normal(rng, dtype, 2, 3, 4)]), Case([_normal(rng, dtype)]), Case([_normal(rng, dtype, 0, 3)])]


def comparison_cases(rng, dtype, opset):
    a = _with_specials(rng, dtype, 3, 4)
    return [Case([a, a[:, ::-1].copy()]), Case([a, a]), Case([a, _normal(rng, dtype, 4)])]


def and_cases(rng, dtype, opset):
    return [Case([rng.random((3, 4)) > 0.5, rng.random((4,)) > 0.5])]


def cast_cases(rng, dtype, opset):
    x = _with_specials(rng, dtype, 3, 4)
    code = _tensor_type(np.zeros(0, dtype))
    return [Case([x], {"to": TensorProto.FLOAT}), Case([x], {"to": TensorProto.DOUBLE}),
            Case([rng.random((3, 4)) > 0.5], {"to": code}), Case([np.array([2, -3], dtype=np.int64)], {"to": code}),
            Case([_normal(rng, dtype, 3, 4) * 10], {"to": TensorProto.INT64}),
            Case([x[1:] > 0], {"to": TensorProto.BOOL})]


# -- pointwise activations, unary math, PRelu, Max/Min, ReduceSumSquare and ReduceL2 of exported models
def attribute_cases(*attribute_sets):
    """The unary cases with each attribute set; the defaults (no attributes) in float32 only."""
    def cases(rng, dtype, opset):
        x = _with_specials(rng, dtype, 3, 4, 5)
        default = [Case([x]), Case([_normal(rng, dtype)])] if dtype == np.float32 else []
        return default + [Case([x], dict(attrs)) for attrs in attribute_sets]
    return cases


def gelu_cases(rng, dtype, opset):
    x = _with_specials(rng, dtype, 3, 4, 5)
    return [Case([x]), Case([x], {"approximate": "none"}), Case([x], {"approximate": "tanh"})]


def nonzero_unary_cases(rng, dtype, opset):
    """Reciprocal: values away from 0, with +-0, +-inf and NaN among them."""
    x = _away_from_zero(rng, dtype, 3, 4, 5)
    x.flat[:5] = [0.0, -0.0, np.inf, -np.inf, np.nan]
    return [Case([x]), Case([np.array(-2.5, dtype=dtype)])]


def prelu_cases(rng, dtype, opset):
    x = _with_specials(rng, dtype, 2, 3, 4, 5)
    return [Case([x, _normal(rng, dtype, 3, 1, 1)]), Case([x, _normal(rng, dtype, 5)]),
            Case([x, _normal(rng, dtype, 1)]), Case([x, _normal(rng, dtype, 2, 3, 4, 5)])]


def variadic_cases(rng, dtype, opset):
    a = _with_specials(rng, dtype, 3, 4)
    ties = a[:, ::-1].copy()
    return [Case([a]), Case([a, ties]), Case([a, _normal(rng, dtype, 4), _normal(rng, dtype, 3, 1)]),
            Case([_normal(rng, dtype), _normal(rng, dtype, 2, 3)])]


# structural ops
def constant_cases(rng, dtype, opset):
    cases = [Case([], {"value": _normal(rng, dtype, 2, 3)}), Case([], {"value": np.array([4, -2], dtype=np.int64)})]
    if opset >= 12:
        cases += [Case([], {"value_float": 2.5}), Case([], {"value_floats": [1.0, -0.5]}), Case([], {"value_int": 3}),
                  Case([], {"value_ints": [2, 0, 5]})]
    return cases


def constant_of_shape_cases(rng, dtype, opset):
    shape = np.array([2, 3], dtype=np.int64)
    return [Case([shape]), Case([shape], {"value": np.array([1.5], dtype=dtype)}),
            Case([np.array([4], dtype=np.int64)], {"value": np.array([7], dtype=np.int64)}),
            Case([np.array([2, 0], dtype=np.int64)], {"value": np.array([1.0], dtype=dtype)})]


def concat_cases(rng, dtype, opset):
    a, b = _normal(rng, dtype, 2, 3, 4), _normal(rng, dtype, 2, 1, 4)
    cases = [Case([a, b], {"axis": 1}), Case([a, a, _normal(rng, dtype, 1, 3, 4)], {"axis": 0}),
             Case([np.array([1, 2], dtype=np.int64), np.array([3], dtype=np.int64)], {"axis": 0})]
    if opset >= 11:
        cases.append(Case([a, b], {"axis": -2}))
    return cases


def split_cases(rng, dtype, opset):
    x = _normal(rng, dtype, 4, 7)
    outputs = ("outputs_0", "outputs_1", "outputs_2")
    cases = [Case([_normal(rng, dtype, 6, 3)], {}, outputs)]
    if opset < 13:
        cases += [Case([x], {"axis": 1, "split": [2, 0, 5]}, outputs),
                  Case([x], {"axis": 0, "split": [1, 3]}, outputs[:2])]
    else:
        cases += [Case([x, np.array([2, 0, 5], dtype=np.int64)], {"axis": 1}, outputs),
                  Case([x, np.array([1, 3], dtype=np.int64)], {"axis": -2}, outputs[:2])]
    if opset >= 18:
        cases += [Case([x], {"axis": 1, "num_outputs": 3}, outputs),
                  Case([x], {"axis": 0, "num_outputs": 2}, outputs[:2])]
    return cases


def gather_cases(rng, dtype, opset):
    x = _normal(rng, dtype, 3, 4, 5)
    cases = [Case([x, np.array([2, 0, 2], dtype=np.int64)]), Case([x, np.array([[1, 3], [0, 0]])], {"axis": 1}),
             Case([x, np.array(4, dtype=np.int32)], {"axis": 2}),
             Case([np.array([5, 6, 7], dtype=np.int64), np.array([0, 2], dtype=np.int64)])]
    if opset >= 11:
        cases += [Case([x, np.array([-1, 0], dtype=np.int64)], {"axis": -1})]
    return cases


def tile_cases(rng, dtype, opset):
    x = _normal(rng, dtype, 2, 3)
    return [Case([x, np.array([2, 3], dtype=np.int64)]), Case([x, np.array([1, 0], dtype=np.int64)]),
            Case([_normal(rng, dtype, 2, 1, 3), np.array([1, 3, 2], dtype=np.int64)])]


def pad_cases(rng, dtype, opset):
    x = _normal(rng, dtype, 2, 3, 4)
    pads = [[0, 1, 2, 0, 2, 1], [0, 0, 1, 1, 1, 3], [1, -1, 0, 0, 2, -2]]
    modes = ["constant", "reflect", "edge"] + (["wrap"] if opset >= 19 else [])
    if opset < 11:
        return ([Case([x], {"pads": p, "mode": m}) for p in pads[:2] for m in modes] +
                [Case([x], {"pads": pads[2], "value": 0.5})])
    cases = [Case([x, np.array(p, dtype=np.int64)], {"mode": m}) for p in pads[:2] for m in modes]
    cases.append(Case([x, np.array(pads[2], dtype=np.int64), np.array(0.5, dtype=dtype)]))
    if opset >= 18:
        cases += [Case([x, np.array([1, 2, 0, 1], dtype=np.int64), None, np.array([2, 0], dtype=np.int64)],
                       {"mode": m}) for m in modes]
    return cases


def _scales(*values):
    return np.array(values, dtype=np.float32)


def upsample_cases(rng, dtype, opset):
    x = _normal(rng, dtype, 1, 2, 3, 4)
    settings = [("nearest", [1.0, 1.0, 2.0, 3.0]), ("linear", [1.0, 1.0, 2.0, 1.5]), ("nearest", [1.0, 1.0, 1.5, 2.5])]
    if opset < 9:
        return [Case([x], {"mode": m, "scales": s}) for m, s in settings]
    return [Case([x, _scales(*s)], {"mode": m}) for m, s in settings]


def resize_cases(rng, dtype, opset):
    """Scales whose products with the dims are whole: the reference's align_corners divides by
    scale * n - 1, not by the output size less one as ONNX Runtime and PyTorch do."""
    x = _normal(rng, dtype, 1, 2, 4, 4)
    if opset < 11:
        return [Case([x, _scales(1, 1, 2, 3)]), Case([x, _scales(1, 1, 1.5, 2)], {"mode": "linear"}),
                Case([x, _scales(1, 1, 0.6, 0.5)], {"mode": "linear"})]
    roi = np.zeros(0, dtype=np.float32)
    coordinates = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]
    if opset >= 19:
        coordinates.append("half_pixel_symmetric")
    cases = []
    for c in coordinates:
        for nearest in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
            cases.append(Case([x, roi, _scales(1, 1, 1.5, 2.25)], {"coordinate_transformation_mode": c,
                                                                  "nearest_mode": nearest}))
        cases += [Case([x, roi, _scales(1, 1, 0.75, 1.75)], {"mode": "linear", "coordinate_transformation_mode": c}),
                  Case([x, roi, roi, np.array([1, 2, 7, 3], dtype=np.int64)],
                       {"mode": "linear", "coordinate_transformation_mode": c}),
                  Case([x, roi, roi, np.array([1, 2, 1, 9], dtype=np.int64)],
                       {"mode": "nearest", "coordinate_transformation_mode": c})]
    if opset >= 18:
        cases += [Case([x, roi, _scales(2.0, 0.5)], {"mode": "linear", "axes": [2, 3]}),
                  Case([x, roi, None, np.array([3, 8], dtype=np.int64)],
                       {"mode": "linear", "axes": [3, 2], "keep_aspect_ratio_policy": "not_larger"}),
                  Case([x, roi, None, np.array([3, 8], dtype=np.int64)],
                       {"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": "not_smaller"})]
    return cases


CASES = {
    "Add": binary_cases("Add"), "Sub": binary_cases("Sub"), "Mul": binary_cases("Mul"), "Div": binary_cases("Div"),
    "Sum": sum_cases, "Neg": unary_cases, "Relu": unary_cases, "Sigmoid": unary_cases, "Tanh": unary_cases,
    "LeakyRelu": leaky_relu_cases, "Softmax": softmax_cases, "LogSoftmax": softmax_cases,
    "Conv": conv_cases, "ConvTranspose": conv_transpose_cases,
    "MaxPool": max_pool_cases, "AveragePool": average_pool_cases,
    "GlobalAveragePool": global_pool_cases, "GlobalMaxPool": global_pool_cases,
    "BatchNormalization": batch_norm_cases, "LayerNormalization": layer_norm_cases,
    "InstanceNormalization": instance_norm_cases, "GroupNormalization": group_norm_cases,
    "Gemm": gemm_cases, "MatMul": matmul_cases,
    "Flatten": flatten_cases, "Reshape": reshape_cases, "Identity": identity_cases, "Shape": shape_cases,
    "Transpose": transpose_cases, "Dropout": dropout_cases, "SoftmaxCrossEntropyLoss": sce_cases,
    "ReduceSum": reduce_sum_cases,
    "Log": positive_unary_cases, "Sqrt": positive_unary_cases, "Exp": unary_cases, "Abs": unary_cases,
    "Sign": unary_cases, "Pow": pow_cases,
    "ReduceMean": lambda rng, dtype, opset: reduce_cases(rng, dtype, opset, 18),
    "ReduceMax": lambda rng, dtype, opset: reduce_cases(rng, dtype, opset, 18),
    "Clip": clip_cases, "Where": where_cases, "Slice": slice_cases, "OneHot": one_hot_cases,
    "NegativeLogLikelihoodLoss": nll_cases, "Unsqueeze": unsqueeze_cases, "Squeeze": squeeze_cases,
    "Expand": expand_cases, "Size": size_cases, "Equal": comparison_cases, "Greater": comparison_cases,
    "Less": comparison_cases, "GreaterOrEqual": comparison_cases, "LessOrEqual": comparison_cases,
    "And": and_cases, "Cast": cast_cases,
    "HardSigmoid": attribute_cases({"alpha": 0.3, "beta": 0.4}, {"alpha": -0.5, "beta": 0.2}),
    "HardSwish": unary_cases, "Softplus": unary_cases, "Elu": attribute_cases({"alpha": 1.0}, {"alpha": 0.3}),
    "Selu": attribute_cases({"alpha": 1.5, "gamma": 0.8}), "Gelu": gelu_cases, "Erf": unary_cases,
    "Reciprocal": nonzero_unary_cases, "PRelu": prelu_cases, "Max": variadic_cases, "Min": variadic_cases,
    "ReduceSumSquare": lambda rng, dtype, opset: reduce_cases(rng, dtype, opset, 18),
    "ReduceL2": lambda rng, dtype, opset: reduce_cases(rng, dtype, opset, 18),
    "Constant": constant_cases, "ConstantOfShape": constant_of_shape_cases, "Concat": concat_cases,
    "Split": split_cases, "Gather": gather_cases, "Tile": tile_cases, "Pad": pad_cases, "Upsample": upsample_cases,
    "Resize": resize_cases,
}


# --------------------------------------------------------------------------- running ONNX's reference
def _tensor_type(array):
    return helper.np_dtype_to_tensor_dtype(array.dtype)


def run_reference(op, opset, inputs, attrs, n_outputs):
    """Outputs of a one-node ONNX model of `op` at `opset`, run by onnx's ReferenceEvaluator."""
    names = ["" if x is None else f"x{i}" for i, x in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    outputs = [f"y{i}" for i in range(n_outputs)]
    attrs = {k: numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v for k, v in attrs.items()}
    node = helper.make_node(op, names, outputs, **attrs)
    graph = helper.make_graph(
        [node], "one_node",
        [helper.make_tensor_value_info(n, _tensor_type(x), x.shape) for n, x in zip(names, inputs) if n],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: x for n, x in zip(names, inputs) if n}
    return ReferenceEvaluator(model).run(None, feeds)


def reference_outputs(op, opset, case, n_outputs):
    """ONNX's reference outputs of a case; where the reference departs from the operator spec,
    those of an equivalent model that it gets right."""
    x, attrs = (case.inputs or [None])[0], case.attrs
    if op in ("Softmax", "LogSoftmax") and opset < 13:
        # Only the opset-13 form (one axis) is implemented; the older form is that op on the
        # input coerced to 2-D at `axis`.
        axis = attrs.get("axis", 1)
        axis = axis + x.ndim if axis < 0 else axis
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        (y,) = run_reference(op, 13, [x.reshape(rows, -1)], {"axis": 1}, 1)
        return [y.reshape(x.shape)]
    if op == "AveragePool" and opset < 7:
        # AveragePool-1 divides by the elements inside the input ("exclude pad"), which is
        # AveragePool-7's default; the reference counts the pads at opset 1.
        return run_reference(op, 7, case.inputs, attrs, n_outputs)
    if op == "GlobalMaxPool" and x.ndim != 4:
        # The reference reduces axes 2 and 3 whatever the rank; the spec's op is a max over
        # every spatial axis.
        axes = np.arange(2, x.ndim, dtype=np.int64)
        return run_reference("ReduceMax", 18, [x, axes], {"keepdims": 1}, 1)
    if op == "ConvTranspose":
        return [_conv_transpose_reference(opset, case.inputs, attrs)]
    if op in FLOAT64_FORMULAS and x.dtype == np.float64:
        # The reference computes Erf in float32, and Gelu and HardSwish through function bodies
        # with float32 constants (HardSwish's 1/6 is a float attribute): in float64 the spec's
        # formula is the reference.
        return [FLOAT64_FORMULAS[op](x, attrs)]


    pads = attrs.get("pads") if op == "Pad" and opset < 11 else case.inputs[1] if op == "Pad" else None
    if pads is not None and min(pads) < 0:
        # The reference refuses negative pads, which crop: pad by the positive ones, then crop.
        grown = list(case.inputs)
        if opset < 11:
            attrs = {**attrs, "pads": [max(p, 0) for p in pads]}
        else:
            grown[1] = np.maximum(pads, 0)
        (y,) = run_reference(op, opset, grown, attrs, 1)
        axes = list(range(x.ndim)) if len(grown) < 4 or grown[3] is None else [a % x.ndim for a in grown[3]]
        crop = [slice(None)] * x.ndim
        for k, a in enumerate(axes):
            crop[a] = slice(max(-pads[k], 0), y.shape[a] - max(-pads[k + len(axes)], 0))
        return [y[tuple(crop)]]
    if op == "Upsample" or op == "Resize" and opset < 11:
        # The reference runs neither Resize-10 nor Upsample beyond integer nearest scales; both
        # are Resize-11 with asymmetric coordinates, rounding nearest positions down where an
        # axis grows (ONNX Runtime's rule; these cases shrink no axis in nearest mode).
        scales = np.asarray(attrs["scales"] if op == "Upsample" and opset < 9 else case.inputs[1], np.float32)
        legacy = {"mode": attrs.get("mode", "nearest"), "coordinate_transformation_mode": "asymmetric",
                  "nearest_mode": "floor"}
        return run_reference("Resize", 11, [x, np.zeros(0, np.float32), scales], legacy, n_outputs)
    outputs = run_reference(op, opset, case.inputs, attrs, n_outputs)
    if op == "MaxPool" and n_outputs == 2 and all(v == 1 for k in ("strides", "dilations")
                                                  for v in attrs.get(k, [1])):
        # With unit strides and dilations the reference unravels a window's argmax with the
        # output's shape instead of the kernel's; the indices of its strided path are right.
        # Such a case checks that minitrain's indices point at the reference's maxima.
        outputs[1] = None
    return outputs


_erf = np.vectorize(math.erf, otypes=[np.float64])
FLOAT64_FORMULAS = {
    "Erf": lambda x, attrs: _erf(x),
    "HardSwish": lambda x, attrs: x * np.clip(x / 6 + 0.5, 0, 1),
    "Gelu": lambda x, attrs: (0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))))
    if attrs.get("approximate") == "tanh" else 0.5 * x * (1 + _erf(x / math.sqrt(2))),
}


def _conv_transpose_reference(opset, inputs, attrs):
    """ConvTranspose by the reference, around two of its departures from the spec: with
    output_shape and auto_pad NOTSET it leaves the begin pads at 0 instead of deriving the pads
    from output_shape (here they are derived by the spec's equations and passed as `pads`), and
    its grouped path writes one channel per group (here each group's channels run ungrouped and
    are concatenated)."""
    x, w, b = (inputs + [None])[:3]
    attrs = dict(attrs)
    if "output_shape" in attrs and attrs.get("auto_pad", "NOTSET") == "NOTSET":
        n = x.ndim - 2
        strides, dilations = attrs.get("strides", [1] * n), attrs.get("dilations", [1] * n)
        output_padding = attrs.get("output_padding", [0] * n)
        total = [strides[i] * (x.shape[2 + i] - 1) + output_padding[i] + (w.shape[2 + i] - 1) * dilations[i] + 1
                 - attrs["output_shape"][i] for i in range(n)]
        attrs["pads"] = [t - t // 2 for t in total] + [t // 2 for t in total]
        del attrs["output_shape"]
    group = attrs.pop("group", 1)
    c_in, c_out = x.shape[1] // group, w.shape[1]
    parts = []
    for g in range(group):
        bias = None if b is None else b[g * c_out:(g + 1) * c_out]
        inputs = [x[:, g * c_in:(g + 1) * c_in], w[g * c_in:(g + 1) * c_in], bias]
        parts.append(run_reference("ConvTranspose", opset, inputs, attrs, 1)[0])
    return np.concatenate(parts, axis=1)


def as_float32_attrs(attrs):
    """The attributes with each float rounded to float32, as an ONNX model stores it."""
    def rounded(v):
        if isinstance(v, float):
            return float(np.float32(v))
        if isinstance(v, (list, tuple)) and any(isinstance(e, float) for e in v):
            return [float(np.float32(e)) for e in v]
        return v
    return {k: rounded(v) for k, v in attrs.items()}


def check_case(op, opset, case):
    case = Case(case.inputs, as_float32_attrs(case.attrs), case.outputs)
    ours = run_node(op, case.inputs, attrs=case.attrs, opset=opset,
                    outputs=None if case.outputs is None else list(case.outputs))
    theirs = reference_outputs(op, opset, case, len(ours))
    float_dtype = next((x.dtype for x in case.inputs if x is not None and x.dtype.kind == "f"), None)
    tol = TOLERANCE.get(float_dtype, 0)
    assert len(ours) == len(theirs)
    if op == "MaxPool" and len(ours) == 2 and theirs[1] is None:
        np.testing.assert_array_equal(case.inputs[0].reshape(-1)[ours[1]], theirs[0],
                                      err_msg="Indices do not point at the maxima")
        theirs = theirs[:1]
    for i, (a, b) in enumerate(zip(ours, theirs)):
        b = np.asarray(b)
        assert a.shape == b.shape, f"output {i}: shape {a.shape}, ONNX's reference {b.shape}"
        assert a.dtype == b.dtype, f"output {i}: dtype {a.dtype}, ONNX's reference {b.dtype}"
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=f"output {i}")


# --------------------------------------------------------------------------- tests
def test_every_forward_op_has_cases():
    missing = sorted({op for op, _ in forward_kernels()} - set(CASES))
    assert not missing, f"ONNX-domain ops with a CPU kernel but no reference cases here: {missing}"


def test_ops_left_out_are_not_onnx_ops():
    for op in NOT_IN_ONNX:
        assert not onnx.defs.has(op), f"{op} is an ONNX op: give it cases"


@pytest.mark.parametrize("op,opset", forward_kernels(), ids=[f"{op}-{opset}" for op, opset in forward_kernels()])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_op_matches_onnx_reference(op, opset, dtype):
    rng = np.random.default_rng(zlib.crc32(f"{op} {opset}".encode()))
    for number, case in enumerate(CASES[op](rng, np.dtype(dtype), opset)):
        try:
            check_case(op, opset, case)
        except AssertionError as error:
            shapes = [None if x is None else x.shape for x in case.inputs]
            raise AssertionError(f"{op} at opset {opset}, case {number} (inputs {shapes}, attributes "
                                 f"{case.attrs}): {error}") from None
