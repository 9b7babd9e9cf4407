"""Every gradient op checks each input against the forward shapes it implies, before any kernel
runs: for each op, a consistent set of inputs runs, and each float input given the right rank
but one wrong dim raises a ShapeError naming the op and that input.  (The kernels index their
inputs with the forward sizes, so a missed check reads out of bounds.)"""
import numpy as np
import pytest

from minitrain import run_node
from minitrain.errors import ShapeError
from minitrain.ops import registered_ops

MS = "com.microsoft"


def f(*shape):
    return np.random.default_rng(len(shape)).standard_normal(shape)


def ints(*shape, high=3):
    return np.random.default_rng(0).integers(0, high, shape)


# MaxPool's indices of a (2, 3, 5) input pooled by 2 with stride 1: offsets into the whole tensor
MAX_INDICES = (np.arange(6)[:, None] * 5 + np.arange(4) + np.arange(4) % 2).reshape(2, 3, 4)

# op -> (domain, attrs, consistent inputs, output_shapes or None)
CASES = {
    "ConvGrad": (MS, {"pads": [1, 0, 1, 0]}, [f(2, 4, 6, 5), f(2, 3, 6, 7), f(4, 3, 3, 3)], None),
    "ConvTransposeGrad": (MS, {"strides": [2, 1]}, [f(2, 4, 9, 7), f(2, 3, 4, 5), f(3, 4, 3, 3)], None),
    "MaxPoolGrad": ("", {"kernel_shape": [2]}, [f(2, 3, 4), MAX_INDICES], {"dX": (2, 3, 5)}),
    "AveragePoolGrad": ("", {"kernel_shape": [2, 2], "strides": [2, 2]}, [f(2, 3, 2, 3)], {"dX": (2, 3, 4, 6)}),
    "ReluGrad": (MS, {}, [f(3, 4), f(3, 4)], None),
    "SigmoidGrad": (MS, {}, [f(3, 4), f(3, 4)], None),
    "TanhGrad": (MS, {}, [f(3, 4), f(3, 4)], None),
    "LeakyReluGrad": (MS, {}, [f(3, 4), f(3, 4)], None),
    "QuickGeluGrad": (MS, {}, [f(3, 4), f(3, 4)], None),
    # gradient ops of the pointwise activations of exported models
    **{op: (MS, {}, [f(3, 4), f(3, 4)], None) for op in ("HardSigmoidGrad", "HardSwishGrad", "SoftplusGrad", "EluGrad",
                                                         "SeluGrad", "GeluGrad", "FastGeluGrad")},
    "SoftmaxGrad": (MS, {}, [f(3, 4), f(3, 4)], None),
    "SoftmaxGrad_13": (MS, {}, [f(3, 4), f(3, 4)], None),
    "LogSoftmaxGrad": (MS, {}, [f(3, 4), f(3, 4)], None),
    "LogSoftmaxGrad_13": (MS, {}, [f(3, 4), f(3, 4)], None),
    "BatchNormalizationGrad": (MS, {}, [f(2, 3, 4), f(2, 3, 4), f(3), f(3), f(3) ** 2 + 1], None),
    # per-sample normalisations
    "LayerNormalizationGrad": (MS, {"axis": 1}, [f(2, 3, 4), f(2, 3, 4), f(3, 4), f(2, 1, 1), f(2, 1, 1) ** 2 + 1],
                               None),
    "InstanceNormalizationGrad": (MS, {}, [f(2, 3, 4), f(2, 3, 4), f(3), f(2, 3), f(2, 3) ** 2 + 1], None),
    "GroupNormalizationGrad": (MS, {"num_groups": 2}, [f(2, 4, 3), f(2, 4, 3), f(4), f(2, 2), f(2, 2) ** 2 + 1], None),
    "GlobalAveragePoolGrad": (MS, {}, [f(2, 3, 1, 1), np.array([2, 3, 4, 5])], None),
    "GlobalMaxPoolGrad": (MS, {}, [f(2, 3, 1), f(2, 3, 6)], None),
    "MSELossGrad": (MS, {"reduction": "none"}, [f(3, 4), f(3, 4), f(3, 4)], None),
    "SoftmaxCrossEntropyLossGrad": (MS, {"reduction": "none"}, [f(5), np.log(np.full((5, 3), 1 / 3)),
                                                                   ints(5), f(3)], None),
    "DropoutGrad": (MS, {}, [f(3, 4), np.ones((3, 4), bool), np.array(0.5), np.array(True)], None),
    "SumToShape": (MS, {}, [f(3, 4), np.array([1, 4])], None),
    "SliceGrad": (MS, {}, [f(2, 5, 3), np.array([4, 5, 6]), np.array([1, -1]), np.array([3, 0]), np.array([0, 2]),
                           np.array([1, -2])], None),
    "NegativeLogLikelihoodLossGrad": (MS, {"reduction": "none"}, [f(5), f(5, 3), ints(5), f(3)], None),
    # gradient ops of the structural ops of exported models
    "GatherGrad": (MS, {"axis": 0}, [np.array([4, 3]), np.array([[0, 3], [2, 2]]), f(2, 2, 3)], None),
    "PadGrad": (MS, {"mode": "reflect"}, [f(2, 5, 7), np.array([0, 1, 2, 0, 1, 1])], None),
    "ResizeGrad": (MS, {"mode": "linear"}, [f(1, 2, 6, 6), f(1, 2, 3, 4), None, np.array([1.0, 1.0, 2.0, 1.5])],
                   None),
}


def test_every_gradient_op_has_a_case():
    gradient_ops = {op for domain, op in registered_ops()
                    if domain == MS and (op.endswith("Grad") or op.endswith("Grad_13") or op == "SumToShape")}
    gradient_ops |= {"MaxPoolGrad", "AveragePoolGrad"}
    assert gradient_ops == set(CASES)


def _run(op, inputs):
    domain, attrs, _, output_shapes = CASES[op]
    return run_node(op, inputs, attrs=attrs, domain=domain, output_shapes=output_shapes)


@pytest.mark.parametrize("op", sorted(CASES))
def test_consistent_inputs_run(op):
    assert all(np.all(np.isfinite(out)) for out in _run(op, CASES[op][2]))


# (op, input, axis) whose size is free: X's broadcast axes in SumToShape, X's spatial axes in
# GlobalMaxPoolGrad (dY is (N, C, 1) whatever they are), every axis of PadGrad's dY (dX is dY
# less the pads)
FREE = {("SumToShape", 0, 0), ("GlobalMaxPoolGrad", 1, 2), *(("PadGrad", 0, axis) for axis in range(3))}


def wrong_dims_cases():
    for op, (_, _, inputs, _) in sorted(CASES.items()):
        for i, x in enumerate(inputs):
            if x is None or x.dtype.kind != "f" or x.ndim == 0:
                continue
            for axis in range(x.ndim):
                if (op, i, axis) in FREE:
                    continue
                yield pytest.param(op, i, axis, id=f"{op}-input{i}-axis{axis}")


@pytest.mark.parametrize("op,i,axis", list(wrong_dims_cases()))
def test_each_input_with_one_wrong_dim_is_refused(op, i, axis):
    from minitrain.ops import get_schema
    inputs = list(CASES[op][2])
    shape = list(inputs[i].shape)
    shape[axis] += 1
    inputs[i] = np.ones(shape, inputs[i].dtype)
    name = get_schema(op, CASES[op][0], None).inputs[i].name
    with pytest.raises(ShapeError) as info:
        _run(op, inputs)
    message = str(info.value)
    assert message.startswith(op) and f"'{name}'" in message, message
