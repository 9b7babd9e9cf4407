"""The cases of test_error_inputs.py, and the child process that runs them.

Modelled on PyTorch's OpInfo error_inputs: every registered op has one sample (inputs and
attributes that run), and the cases are that sample spoiled one way at a time: an input with
another rank, one wrong dim, an empty dim, another dtype; an attribute NaN, infinite, huge,
negative, of the wrong length, or unknown; a required input left out.  A case either must
raise a minitrain error (expect "error"), or may also run (expect "any"); anything else (a
crash, a hang, NumPy's or Python's own exception) fails it.

`python tests/error_inputs.py FIRST LAST` runs cases FIRST..LAST-1, printing `begin i` before
and `end i STATUS DETAIL` after each, so the parent can tell which case killed a child."""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import numpy as np

from minitrain.bfloat16 import BFLOAT16

MS = "com.microsoft"
FUSED = "ai.minitrain.fused"
HUGE_INT = 2 ** 40
BEYOND_INT64 = 2 ** 63


def f(*shape):
    return np.random.default_rng(len(shape)).standard_normal(shape)


def labels(*shape, high=3):
    return np.random.default_rng(0).integers(0, high, shape)


# MaxPool's indices of a (2, 3, 5) input pooled by 2 with stride 1: offsets into the whole tensor
MAX_INDICES = (np.arange(6)[:, None] * 5 + np.arange(4) + np.arange(4) % 2).reshape(2, 3, 4)

# (domain, op) -> (inputs, attrs, output_shapes): one sample that runs
SAMPLES = {
    ("", "Add"): ([f(2, 3), f(3)], {}, None),
    ("", "Sub"): ([f(2, 3), f(3)], {}, None),
    ("", "Mul"): ([f(2, 3), f(3)], {}, None),
    ("", "Div"): ([f(2, 3), f(3) + 3], {}, None),
    ("", "Sum"): ([f(2, 3), f(3), f(2, 1)], {}, None),
    ("", "Neg"): ([f(2, 3)], {}, None),
    ("", "Identity"): ([f(2, 3)], {}, None),
    ("", "Relu"): ([f(2, 3)], {}, None),
    ("", "Sigmoid"): ([f(2, 3)], {}, None),
    ("", "Tanh"): ([f(2, 3)], {}, None),
    ("", "LeakyRelu"): ([f(2, 3)], {"alpha": 0.1}, None),
    (MS, "QuickGelu"): ([f(2, 3)], {"alpha": 1.702}, None),
    # pointwise activations, unary math, PRelu, Max/Min, ReduceSumSquare and ReduceL2 of exported models
    ("", "HardSigmoid"): ([f(2, 3)], {"alpha": 0.3, "beta": 0.4}, None),
    ("", "HardSwish"): ([f(2, 3)], {}, None),
    ("", "Softplus"): ([f(2, 3)], {}, None),
    ("", "Elu"): ([f(2, 3)], {"alpha": 0.5}, None),
    ("", "Selu"): ([f(2, 3)], {"alpha": 1.5, "gamma": 0.8}, None),
    ("", "Gelu"): ([f(2, 3)], {"approximate": "tanh"}, None),
    (MS, "Gelu"): ([f(2, 3)], {}, None),
    (MS, "FastGelu"): ([f(2, 3), f(3)], {}, None),
    (MS, "BiasGelu"): ([f(2, 3), f(3)], {}, None),
    ("", "Erf"): ([f(2, 3)], {}, None),
    ("", "Reciprocal"): ([f(2, 3) + 3], {}, None),
    ("", "PRelu"): ([f(2, 3, 4), f(3, 1)], {}, None),
    ("", "Max"): ([f(2, 3), f(3), f(2, 1)], {}, None),
    ("", "Min"): ([f(2, 3), f(3), f(2, 1)], {}, None),
    ("", "ReduceSumSquare"): ([f(2, 3, 4), np.array([0, -1])], {"keepdims": 0, "noop_with_empty_axes": 0}, None),
    ("", "ReduceL2"): ([f(2, 3, 4), np.array([1])], {"keepdims": 1, "noop_with_empty_axes": 0}, None),
    ("", "Softmax"): ([f(2, 3)], {"axis": -1}, None),
    ("", "LogSoftmax"): ([f(2, 3)], {"axis": -1}, None),
    ("", "Flatten"): ([f(2, 3, 4)], {"axis": 1}, None),
    ("", "Reshape"): ([f(2, 3, 4), np.array([4, -1])], {"allowzero": 0}, None),
    ("", "Shape"): ([f(2, 3)], {}, None),
    ("", "ReduceSum"): ([f(2, 3, 4), np.array([0, -1])], {"keepdims": 0}, None),
    ("", "Transpose"): ([f(2, 3, 4)], {"perm": [2, 0, 1]}, None),
    ("", "Gemm"): ([f(2, 3), f(4, 3), f(4)], {"transA": 0, "transB": 1, "alpha": 0.5, "beta": 2.0}, None),
    ("", "MatMul"): ([f(2, 3, 4), f(4, 5)], {}, None),
    (MS, "FusedGemm"): ([f(2, 3), f(4, 3), f(4)], {"transA": 0, "transB": 1, "alpha": 0.5, "beta": 2.0,
                                                   "activation": "LeakyRelu", "activation_alpha": 0.1}, None),
    (FUSED, "ClipGrad"): ([f(2, 3), f(2, 3) * 4, np.array(0.0), np.array(6.0)], {}, None),
    (FUSED, "Linear"): ([f(2, 3, 4), f(5, 4), f(5), f(5) + 1], {}, None),
    (FUSED, "LinearGrad"): ([f(2, 3, 5), f(2, 3, 4), f(5, 4), f(5), f(5) + 1], {}, None),
    (FUSED, "MulGrad"): ([f(2, 3, 4, 5), f(2, 3, 4, 5) * 2, f(2, 3, 1, 1)], {}, None),
    (FUSED, "GlobalAveragePoolGradAdd"): ([f(2, 3, 1, 1), f(2, 3, 4, 5)], {}, None),
    (FUSED, "BatchNormActivationGrad"): ([f(2, 3, 4), f(2, 3, 4) * 4, f(2, 3, 4), f(3), f(3), f(3) ** 2 + 1],
                                         {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 1,
                                          "activation": "HardSwish"}, None),
    (MS, "FusedConv"): ([f(2, 4, 6, 5), f(6, 2, 3, 3), f(6)],
                        {"pads": [1, 0, 1, 0], "strides": [2, 1], "dilations": [1, 1], "group": 2,
                         "kernel_shape": [3, 3], "auto_pad": "NOTSET", "activation": "LeakyRelu",
                         "activation_params": [0.1]}, None),
    ("", "Conv"): ([f(2, 4, 6, 5), f(6, 2, 3, 3), f(6)],
                   {"pads": [1, 0, 1, 0], "strides": [2, 1], "dilations": [1, 1], "group": 2,
                    "kernel_shape": [3, 3], "auto_pad": "NOTSET"}, None),
    ("", "ConvTranspose"): ([f(2, 4, 3, 4), f(4, 3, 3, 2), f(6)],
                            {"strides": [2, 1], "pads": [1, 0, 0, 1], "output_padding": [1, 0], "group": 2,
                             "dilations": [1, 2], "kernel_shape": [3, 2], "auto_pad": "NOTSET"}, None),
    ("", "MaxPool"): ([f(2, 3, 7, 6)], {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 0],
                                         "dilations": [1, 2], "ceil_mode": 1, "storage_order": 0,
                                         "auto_pad": "NOTSET"}, None),
    ("", "AveragePool"): ([f(2, 3, 7, 6)], {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 0],
                                             "dilations": [1, 1], "ceil_mode": 1, "count_include_pad": 1,
                                             "auto_pad": "NOTSET"}, None),
    ("", "GlobalAveragePool"): ([f(2, 3, 4, 5)], {}, None),
    ("", "GlobalMaxPool"): ([f(2, 3, 4, 5)], {}, None),
    ("", "BatchNormalization"): ([f(2, 3, 4), f(3), f(3), f(3), f(3) ** 2 + 1],
                                 {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 1}, None),
    # per-sample normalisations
    ("", "LayerNormalization"): ([f(2, 3, 4), f(3, 4), f(3, 4)], {"axis": 1, "epsilon": 1e-5, "stash_type": 1}, None),
    (MS, "LayerNormalization"): ([f(2, 3, 4), f(4), f(4)], {"axis": -1, "epsilon": 1e-5, "stash_type": 1}, None),
    ("", "InstanceNormalization"): ([f(2, 3, 4), f(3), f(3)], {"epsilon": 1e-5}, None),
    ("", "GroupNormalization"): ([f(2, 4, 3), f(4), f(4)], {"epsilon": 1e-5, "num_groups": 2, "stash_type": 1}, None),
    ("", "Dropout"): ([f(3, 4), np.array(0.3), np.array(True)], {"seed": 1}, None),
    ("", "SoftmaxCrossEntropyLoss"): ([f(5, 3), labels(5), f(3) ** 2], {"reduction": "mean", "ignore_index": 1},
                                      None),
    (MS, "MSELoss"): ([f(3, 4), f(3, 4)], {"reduction": "mean"}, None),
    (MS, "ConvGrad"): ([f(2, 4, 6, 5), f(2, 3, 6, 7), f(4, 3, 3, 3)],
                       {"pads": [1, 0, 1, 0], "strides": [1, 1], "dilations": [1, 1], "group": 1,
                        "kernel_shape": [3, 3], "auto_pad": "NOTSET"}, None),
    (MS, "ConvTransposeGrad"): ([f(2, 4, 9, 7), f(2, 3, 4, 5), f(3, 4, 3, 3)],
                                {"strides": [2, 1], "pads": [0, 0, 0, 0], "output_padding": [0, 0], "group": 1,
                                 "dilations": [1, 1], "kernel_shape": [3, 3], "auto_pad": "NOTSET"}, None),
    ("", "MaxPoolGrad"): ([f(2, 3, 4), MAX_INDICES], {"kernel_shape": [2], "strides": [1], "pads": [0, 0],
                                                       "dilations": [1], "ceil_mode": 0, "storage_order": 0,
                                                       "auto_pad": "NOTSET"}, {"dX": (2, 3, 5)}),
    ("", "AveragePoolGrad"): ([f(2, 3, 2, 3)], {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0],
                                                "dilations": [1, 1], "ceil_mode": 0, "count_include_pad": 0,
                                                "auto_pad": "NOTSET"}, {"dX": (2, 3, 4, 6)}),
    (MS, "ReluGrad"): ([f(3, 4), f(3, 4)], {}, None),
    (MS, "SigmoidGrad"): ([f(3, 4), f(3, 4)], {}, None),
    (MS, "TanhGrad"): ([f(3, 4), f(3, 4)], {}, None),
    (MS, "LeakyReluGrad"): ([f(3, 4), f(3, 4)], {"alpha": 0.1}, None),
    (MS, "QuickGeluGrad"): ([f(3, 4), f(3, 4)], {"alpha": 1.702}, None),
    # gradient ops of the pointwise activations of exported models
    (MS, "HardSigmoidGrad"): ([f(3, 4), f(3, 4)], {"alpha": 0.3, "beta": 0.4}, None),
    (MS, "HardSwishGrad"): ([f(3, 4), f(3, 4)], {}, None),
    (MS, "SoftplusGrad"): ([f(3, 4), f(3, 4)], {}, None),
    (MS, "EluGrad"): ([f(3, 4), f(3, 4)], {"alpha": 0.5}, None),
    (MS, "SeluGrad"): ([f(3, 4), f(3, 4)], {"alpha": 1.5, "gamma": 0.8}, None),
    (MS, "GeluGrad"): ([f(3, 4), f(3, 4)], {}, None),
    (MS, "FastGeluGrad"): ([f(3, 4), f(3, 4)], {}, None),
    (MS, "BiasGeluGrad_dX"): ([f(3, 4), f(3, 4), f(4)], {}, None),
    (MS, "SoftmaxGrad"): ([f(3, 4), f(3, 4)], {"axis": 1}, None),
    (MS, "SoftmaxGrad_13"): ([f(3, 4), f(3, 4)], {"axis": -1}, None),
    (MS, "LogSoftmaxGrad"): ([f(3, 4), f(3, 4)], {"axis": 1}, None),
    (MS, "LogSoftmaxGrad_13"): ([f(3, 4), f(3, 4)], {"axis": -1}, None),
    (MS, "BatchNormalizationGrad"): ([f(2, 3, 4), f(2, 3, 4), f(3), f(3), f(3) ** 2 + 1],
                                     {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 1}, None),
    # per-sample normalisations
    (MS, "LayerNormalizationGrad"): ([f(2, 3, 4), f(2, 3, 4), f(3, 4), f(2, 1, 1), f(2, 1, 1) ** 2 + 1],
                                     {"axis": 1, "epsilon": 1e-5, "stash_type": 1}, None),
    (MS, "InstanceNormalizationGrad"): ([f(2, 3, 4), f(2, 3, 4), f(3), f(2, 3), f(2, 3) ** 2 + 1],
                                        {"epsilon": 1e-5}, None),
    (MS, "GroupNormalizationGrad"): ([f(2, 4, 3), f(2, 4, 3), f(4), f(2, 2), f(2, 2) ** 2 + 1],
                                     {"epsilon": 1e-5, "num_groups": 2, "stash_type": 1}, None),
    (MS, "GlobalAveragePoolGrad"): ([f(2, 3, 1, 1), np.array([2, 3, 4, 5])], {}, None),
    (MS, "GlobalMaxPoolGrad"): ([f(2, 3, 1), f(2, 3, 6)], {}, None),
    (MS, "MSELossGrad"): ([f(3, 4), f(3, 4), f(3, 4)], {"reduction": "none"}, None),
    (MS, "SoftmaxCrossEntropyLossGrad"): ([f(5), np.log(np.full((5, 3), 1 / 3)), labels(5), f(3)],
                                          {"reduction": "none", "ignore_index": 0}, None),
    (MS, "DropoutGrad"): ([f(3, 4), np.ones((3, 4), bool), np.array(0.5), np.array(True)], {}, None),
    (MS, "SumToShape"): ([f(3, 4), np.array([1, 4])], {}, None),
    (MS, "NcclAllReduce"): ([f(2, 3)], {"group_type": 0}, None),
    (MS, "InPlaceAccumulator"): ([f(3, 2), f(3, 2), np.array(0.5)], {}, None),
    (MS, "InPlaceAccumulatorV2"): ([f(3, 2), f(3, 2), np.array([True])], {}, None),
    (MS, "BatchNormInternal"): ([f(2, 3, 4), f(3), f(3), f(3), f(3) ** 2 + 1],
                                {"epsilon": 1e-5, "momentum": 0.9, "training_mode": 1}, None),
    (MS, "AdamWOptimizer"): ([np.array([0.1]), np.array([3]), f(3, 2), f(3, 2), f(3, 2), f(3, 2) ** 2],
                             {"alpha": 0.9, "beta": 0.999, "epsilon": 1e-6, "weight_decay": 0.01, "correct_bias": 1,
                              "adam_mode": 1}, None),
    (MS, "SGDOptimizerV2"): ([np.array([0.1]), f(3, 2), f(3, 2)], {}, None),
    (MS, "SGDOptimizer"): ([np.array(0.1), f(3, 2), f(2), f(3, 2), f(2), f(3, 2), f(2)],
                           {"momentum": 0.9, "nesterov": 1, "weight_decay": 0.01, "max_norm": 1.0}, None),
    (MS, "AdamOptimizer"): ([np.array(0.1), np.array(3), f(3, 2), f(3, 2), f(3, 2), f(3, 2) ** 2],
                            {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "decoupled_weight_decay": 1,
                             "weight_decay": 0.01, "max_norm": 1.0}, None),
    (MS, "MixedPrecisionScale"): ([np.array(0.5, np.float32), f(3, 2)], {"to": 1}, None),
    (MS, "LossScaleUpdate"): ([np.array(2.0), np.array(1024.0, np.float32), np.array(0), np.array(0)],
                              {"growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}, None),
    ("", "Log"): ([f(2, 3) ** 2 + 0.1], {}, None),
    ("", "Exp"): ([f(2, 3)], {}, None),
    ("", "Sqrt"): ([f(2, 3) ** 2], {}, None),
    ("", "Abs"): ([f(2, 3)], {}, None),
    ("", "Sign"): ([f(2, 3)], {}, None),
    ("", "Pow"): ([f(2, 3) ** 2 + 0.1, f(3)], {}, None),
    ("", "ReduceMean"): ([f(2, 3, 4), np.array([0, -1])], {"keepdims": 0, "noop_with_empty_axes": 0}, None),
    ("", "ReduceMax"): ([f(2, 3, 4), np.array([1])], {"keepdims": 1, "noop_with_empty_axes": 0}, None),
    ("", "Clip"): ([f(2, 3), np.array(-0.5), np.array(0.5)], {}, None),
    ("", "Where"): ([f(2, 3) > 0, f(2, 3), f(3)], {}, None),
    ("", "Slice"): ([f(4, 5, 6), np.array([1, -1]), np.array([3, 0]), np.array([0, 2]), np.array([1, -2])], {}, None),
    (MS, "SliceGrad"): ([f(2, 5, 3), np.array([4, 5, 6]), np.array([1, -1]), np.array([3, 0]), np.array([0, 2]),
                         np.array([1, -2])], {}, None),
    ("", "OneHot"): ([labels(2, 3), np.array([3]), np.array([0.0, 1.0])], {"axis": -1}, None),
    ("", "NegativeLogLikelihoodLoss"): ([f(5, 3), labels(5), f(3) ** 2], {"reduction": "mean", "ignore_index": 1},
                                        None),
    (MS, "NegativeLogLikelihoodLossGrad"): ([f(5), f(5, 3), labels(5), f(3)], {"reduction": "none", "ignore_index": 0},
                                            None),
    ("", "Unsqueeze"): ([f(2, 3), np.array([0, -1])], {}, None),
    ("", "Squeeze"): ([f(2, 1, 3), np.array([1])], {}, None),
    ("", "Expand"): ([f(3, 1), np.array([2, 3, 4])], {}, None),
    ("", "Size"): ([f(2, 3)], {}, None),
    (MS, "Scale"): ([f(2, 3), np.array(4.0)], {"scale_down": 1}, None),
    ("", "Equal"): ([f(2, 3), f(3)], {}, None),
    ("", "Greater"): ([f(2, 3), f(3)], {}, None),
    ("", "Less"): ([f(2, 3), f(3)], {}, None),
    ("", "GreaterOrEqual"): ([f(2, 3), f(3)], {}, None),
    ("", "LessOrEqual"): ([f(2, 3), f(3)], {}, None),
    ("", "And"): ([f(2, 3) > 0, f(3) > 0], {}, None),
    ("", "Cast"): ([f(2, 3) > 0], {"to": 1, "saturate": 1}, None),
    # structural ops
    ("", "Constant"): ([], {"value": f(2, 3)}, None),
    ("", "ConstantOfShape"): ([np.array([2, 3])], {"value": np.array([1.5])}, None),
    ("", "Concat"): ([f(2, 3), f(2, 4)], {"axis": 1}, None),
    ("", "Split"): ([f(2, 64)], {"axis": 1}, None),
    ("", "Gather"): ([f(4, 3), np.array([[0, -1], [2, 2]])], {"axis": 0}, None),
    (MS, "GatherGrad"): ([np.array([4, 3]), np.array([[0, -1], [2, 2]]), f(2, 2, 3)], {"axis": 0}, None),
    ("", "Tile"): ([f(2, 3), np.array([2, 1])], {}, None),
    ("", "Pad"): ([f(2, 3, 4), np.array([0, 1, 2, 0, 1, 1]), np.array(0.5)], {"mode": "reflect"}, None),
    (MS, "PadGrad"): ([f(2, 5, 7), np.array([0, 1, 2, 0, 1, 1])], {"mode": "reflect"}, None),
    ("", "Upsample"): ([f(1, 2, 3, 4), np.array([1.0, 1.0, 2.0, 1.5])], {"mode": "linear"}, None),
    ("", "Resize"): ([f(1, 2, 3, 4), None, np.array([1.0, 1.0, 2.0, 1.5])],
                     {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}, None),
    (MS, "ResizeGrad"): ([f(1, 2, 6, 6), f(1, 2, 3, 4), None, np.array([1.0, 1.0, 2.0, 1.5])], {"mode": "linear"},
                         None),
}


@dataclass
class Case:
    id: str
    domain: str
    op: str
    inputs: list
    attrs: dict
    output_shapes: dict = None
    expect: str = "any"          # "error": must raise a minitrain error; "any": may also run; "run": must run
    dtype_cast: dict = field(default_factory=dict)
    opset: int = None            # the domain's opset (None: the newest)


def _spoiled_inputs(domain, op, inputs, attrs, shapes, formal):
    """Cases that change one input at a time."""
    def case(tag, i, value, expect="any"):
        spoiled = list(inputs)
        spoiled[i] = value
        return Case(f"{op}-input{i}-{tag}", domain, op, spoiled, attrs, shapes, expect)
    def spec(i):
        return formal[min(i, len(formal) - 1)]
    def sharing(i):     # the inputs of input i's float type variable ("T", "T1"...), which share one dtype
        var = spec(i).types
        return [j for j, x in enumerate(inputs) if x is not None and isinstance(var, str) and spec(j).types == var]
    for i, x in enumerate(inputs):
        if x is None:
            continue
        yield case("rank+1", i, x.reshape(x.shape + (1,)))
        if x.ndim:
            yield case("rank-1", i, np.ascontiguousarray(x[..., 0]))
        for axis in range(x.ndim):
            bigger = list(x.shape)
            bigger[axis] += 1
            yield case(f"dim{axis}+1", i, np.resize(x, bigger))
            empty = list(x.shape)
            empty[axis] = 0
            yield case(f"dim{axis}=0", i, np.zeros(empty, x.dtype))
        if x.dtype.kind == "f":
            yield case("int32", i, x.astype(np.int32), "error")
            yield case("float16", i, x.astype(np.float16))      # most CPU kernels lack it: an error
            if BFLOAT16 is not None:        # no CPU kernel takes it as its element type T
                yield case("bfloat16", i, x.astype(BFLOAT16), "error" if spec(i).types == "T" else "any")
            if len(sharing(i)) > 1:
                yield case("float32_among_float64", i, x.astype(np.float32), "error")
        elif x.dtype.kind in "iu":
            yield case("as_float", i, x.astype(np.float64), "error")
    required = sum(1 for spec in formal if not spec.optional and not spec.variadic)
    if required:
        yield Case(f"{op}-missing-input{required - 1}", domain, op, list(inputs[:required - 1]), attrs, shapes,
                   "error")


def _attr_values(kind, current):
    """(tag, value, expect) spoiling an attribute of this kind."""
    if kind == "float":
        yield from (("nan", math.nan, "error"), ("inf", math.inf, "error"), ("-inf", -math.inf, "error"),
                    ("huge", 1e300, "any"), ("negative", -1.0, "any"), ("zero", 0.0, "any"))
    elif kind == "int":
        yield from (("negative", -1, "any"), ("zero", 0, "any"), ("huge", HUGE_INT, "any"),
                    ("-huge", -HUGE_INT, "any"), ("beyond_int64", BEYOND_INT64, "error"),
                    ("text", "one", "error"))
    elif kind == "ints":
        n = len(current) if current else 1
        yield from (("empty", [], "any"), ("zeros", [0] * n, "any"), ("negative", [-1] * n, "any"),
                    ("huge", [HUGE_INT] * n, "any"), ("beyond_int64", [BEYOND_INT64] * n, "error"),
                    ("longer", [1] * (n + 1), "any"), ("floats", [1.5] * n, "error"))
    elif kind == "floats":
        yield ("nan", [math.nan], "error")
    elif kind == "string":
        yield from (("bogus", "BOGUS", "error"), ("int", 3, "error"))


def _spoiled_attrs(domain, op, inputs, attrs, shapes, schema_attrs):
    for name, spec in sorted(schema_attrs.items()):
        for tag, value, expect in _attr_values(spec.kind, attrs.get(name)):
            yield Case(f"{op}-{name}={tag}", domain, op, inputs, {**attrs, name: value}, shapes, expect)
    yield Case(f"{op}-unknown-attribute", domain, op, inputs, {**attrs, "no_such_attribute": 1}, shapes, "error")


def _known_crashes():
    """Inputs that once crashed the process, as found."""
    x = np.zeros((2, 3, 10 ** 6), np.float32)
    stats = [np.ones(3, np.float32), np.zeros(3, np.float32), np.ones(3, np.float32)]
    yield Case("BatchNormalizationGrad-dY-(2,3,1)-for-X-(2,3,10**6)", MS, "BatchNormalizationGrad",
               [np.ones((2, 3, 1), np.float32), x] + stats, {}, None, "error")


def _found_by_fuzz():
    """Inputs a fuzz over every op once crashed on or answered wrongly, as found; each case's id
    says what it checks."""
    fused = "ai.minitrain.fused"
    no_channels = [f(2, 0, 5), f(3, 0, 2), f(3)]
    yield Case("Conv-zero-input-channels", "", "Conv", no_channels, {}, None, "run")
    yield Case("FusedConv-zero-input-channels", MS, "FusedConv", no_channels, {"activation": "Relu"}, None, "run")
    yield Case("ConvTranspose-zero-input-channels", "", "ConvTranspose", [f(2, 0, 5), f(0, 3, 2), f(3)], {}, None,
               "run")
    for group in (1, 3):
        yield Case(f"ConvTransposeGrad-zero-input-channels-group{group}", MS, "ConvTransposeGrad",
                   [f(2, group, 6), f(2, 0, 5), f(0, 1, 2)], {"group": group}, None, "run")
    for kernel in ((1, 1, 2), (1, 2, 2)):
        tiles = {"kernel_shape": list(kernel), "strides": list(kernel)}
        x = f(2, 3, 3, 4, 16)
        tag = "x".join(map(str, kernel))
        yield Case(f"MaxPool-3d-kernel-{tag}-depth-3", "", "MaxPool", [x], tiles, None, "run")
        dy = f(2, 3, 3, 4 // kernel[1], 8)
        indices = (np.arange(dy.size).reshape(dy.shape) % 8 * 2 + np.arange(2 * 3 * 3 * 4 // kernel[1])
                   .reshape(2, 3, 3, -1, 1) * 16 * kernel[1])
        yield Case(f"MaxPoolGrad-3d-kernel-{tag}-depth-3", "", "MaxPoolGrad", [dy, indices], tiles,
                   {"dX": x.shape}, "run")
        yield Case(f"MaxPoolActivationGrad-3d-kernel-{tag}-depth-3", fused, "MaxPoolActivationGrad",
                   [dy, x], {"kernel_shape": list(kernel), "activation": "Relu"}, None, "run")
    for kernel, pads in (((1, 3, 3), [0, 1, 1, 0, 1, 1]), ((1, 1, 1), [0] * 6)):
        attrs = {"kernel_shape": list(kernel), "pads": pads}
        tag = "x".join(map(str, kernel))
        yield Case(f"AveragePool-3d-kernel-{tag}-depth-3", "", "AveragePool", [f(2, 3, 3, 5, 6)], attrs, None, "run")
        yield Case(f"AveragePoolGrad-3d-kernel-{tag}-depth-3", "", "AveragePoolGrad", [f(2, 3, 3, 5, 6)], attrs,
                   {"dX": (2, 3, 3, 5, 6)}, "run")
    for ratio in (1.0, 1.5, -0.1, math.nan):
        for training in (False, True):
            yield Case(f"Dropout-ratio={ratio}-training={training}", "", "Dropout",
                       [f(3, 4), np.array(ratio), np.array(training)], {}, None, "error")
            yield Case(f"DropoutGrad-ratio={ratio}-training={training}", MS, "DropoutGrad",
                       [f(3, 4), np.ones((3, 4), bool), np.array(ratio), np.array(training)], {}, None, "error")
    for beta in (1.0, 0.0):
        two_way = [f(1, 3), f(3, 4), f(3, 4)]      # C (3, 4) does not broadcast to Y (1, 4)
        yield Case(f"Gemm-C-broadcast-both-ways-beta={beta}", "", "Gemm", two_way, {"beta": beta}, None, "error")
        yield Case(f"FusedGemm-C-broadcast-both-ways-beta={beta}", MS, "FusedGemm", two_way,
                   {"beta": beta, "activation": "Relu"}, None, "error")
    for opset in (9, 10):
        yield Case(f"Gemm-opset{opset}-without-C", "", "Gemm", [f(2, 3), f(3, 4)], {}, None, "error", opset=opset)
    for tag, shape in (("negative", [2, 3, -4, 5]), ("zero", [2, 3, 0, 5]), ("huge", [2, 3, HUGE_INT, 5]),
                       ("rank-2", [2, 3])):
        yield Case(f"GlobalAveragePoolGrad-shape-{tag}", MS, "GlobalAveragePoolGrad",
                   [f(2, 3, 1, 1), np.array(shape)], {}, None, "error")
    empty = np.zeros((0, 4))
    yield Case("MSELossGrad-empty-prediction-mean", MS, "MSELossGrad", [np.array(1.0), empty, empty],
               {"reduction": "mean"}, None, "run")
    sgd = [np.array(0.1), f(3, 2), f(3, 2), f(3, 2)]
    for i in (1, 2):
        yield Case(f"SGDOptimizer-tensor{i - 1}-absent", MS, "SGDOptimizer", sgd[:i] + [None] + sgd[i + 1:],
                   {"momentum": 0.9}, None, "error")
    adam = [np.array(0.1), np.array(3), f(3, 2), f(3, 2), f(3, 2), f(3, 2) ** 2]
    for i in range(2, 6):
        yield Case(f"AdamOptimizer-tensor{i - 2}-absent", MS, "AdamOptimizer", adam[:i] + [None] + adam[i + 1:], {},
                   None, "error")
    yield Case("AdamOptimizer-step-shape-(0,)", MS, "AdamOptimizer", [adam[0], np.zeros(0, np.int64)] + adam[2:], {},
               None, "error")
    yield Case("Sum-absent-middle-input", "", "Sum", [f(2, 3), None, f(2, 3)], {}, None, "error")
    scalar = np.array(1.5)
    for op in ("Add", "Sub", "Mul", "Div"):
        yield Case(f"{op}-0d-inputs-give-an-array", "", op, [scalar, scalar], {}, None, "run")
    yield Case("Sum-0d-inputs-give-an-array", "", "Sum", [scalar, scalar, scalar], {}, None, "run")
    yield Case("Neg-0d-input-gives-an-array", "", "Neg", [scalar], {}, None, "run")
    yield Case("MatMul-1d-1d-gives-an-array", "", "MatMul", [f(3), f(3)], {}, None, "run")
    yield Case("MSELoss-0d-none-gives-an-array", MS, "MSELoss", [scalar, scalar], {"reduction": "none"}, None, "run")
    yield Case("SumToShape-to-shape-[]-gives-an-array", MS, "SumToShape", [f(3, 4), np.zeros(0, np.int64)], {},
               None, "run")


def cases():
    """Every case, in a fixed order (a child and its parent build the same list)."""
    from minitrain.ops import get_schema
    result = list(_known_crashes()) + list(_found_by_fuzz())
    for (domain, op), (inputs, attrs, shapes) in sorted(SAMPLES.items()):
        sch = get_schema(op, domain, None)
        result.append(Case(f"{op}-sample", domain, op, list(inputs), dict(attrs), shapes, "run"))
        result.extend(_spoiled_inputs(domain, op, list(inputs), dict(attrs), shapes, sch.inputs))
        result.extend(_spoiled_attrs(domain, op, list(inputs), dict(attrs), shapes, sch.attrs))
    return result


def run_case(case):
    """(status, detail): ok, or a reason the case failed."""
    from minitrain import run_node
    from minitrain.errors import MinitrainError
    inputs = [None if x is None else x.copy() for x in case.inputs]
    try:
        results = run_node(case.op, inputs, attrs=case.attrs, domain=case.domain, opset=case.opset,
                           output_shapes=case.output_shapes)
    except MinitrainError as e:
        if case.expect == "run":
            return "fail", f"the sample does not run: {type(e).__name__}: {e}"
        if not isinstance(e, (ValueError, TypeError)) or case.op not in str(e):
            return "fail", f"{type(e).__name__} does not name the op: {e}"
        return "ok", type(e).__name__
    except BaseException as e:         # noqa: BLE001 - anything else is the failure being tested for
        return "fail", f"{type(e).__name__}: {e}"
    if case.expect == "error":
        return "fail", "ran without an error"
    not_arrays = [type(r).__name__ for r in results if not isinstance(r, np.ndarray)]
    if not_arrays:
        return "fail", f"run_node returned {not_arrays}, not NumPy arrays"
    return "ok", "ran"


def main(first, last):
    import minitrain.random
    all_cases = cases()
    for i in range(first, min(last, len(all_cases))):
        minitrain.random.seed(0)
        print(f"begin {i}", flush=True)
        status, detail = run_case(all_cases[i])
        print(f"end {i} {status} {' '.join(detail.split())[:500]}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
