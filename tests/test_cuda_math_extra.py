"""The CUDA kernels of the activations, unary math, Pow/Max/Min/PRelu, Clip, Scale, the
comparisons, And, Where, Cast, ReduceSumSquare and ReduceL2 against the CPU kernels, beyond
the op table's cases (test_op_table.py runs every opset and non-contiguous inputs): long
odd-sized inputs (the 16-byte packs and their tails), every broadcast pattern, device-resident
Clip bounds, every Cast pair, reductions over every axis set; and a model exported with those
activations trained on the GPU with the whole step captured, beside the CPU."""
import io
import itertools
import warnings

import numpy as np
import pytest

from cuda_parity import DTYPES, check_parity
from minitrain import nn, optim, run_node
from minitrain.providers import get_provider

pytestmark = pytest.mark.cuda
MS = "com.microsoft"

LONG = (3, 1027)
ACTIVATIONS = [("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, "", None), ("HardSwish", {}, "", None),
               ("Softplus", {}, "", None), ("Elu", {"alpha": 0.5}, "", None), ("Selu", {}, "", None),
               ("Gelu", {}, "", 20), ("Gelu", {"approximate": "tanh"}, "", 20), ("Gelu", {}, MS, None),
               ("FastGelu", {}, MS, None), ("Erf", {}, "", None), ("Abs", {}, "", None), ("Sign", {}, "", None)]
GRADIENTS = [("HardSigmoidGrad", {"alpha": 0.3, "beta": 0.4}), ("HardSwishGrad", {}), ("SoftplusGrad", {}),
             ("EluGrad", {"alpha": 0.5}), ("SeluGrad", {}), ("GeluGrad", {}), ("FastGeluGrad", {})]
BROADCASTS = [((2, 3), (2, 3)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((), (2, 3)), ((33, 1031), (33, 1031)),
              ((8, 16, 9, 9), (16, 1, 1)), ((0, 3), (3,))]


@pytest.mark.parametrize("op,attrs,domain,opset", ACTIVATIONS, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_on_long_inputs(op, attrs, domain, opset, dtype, rng):
    x = rng.standard_normal(LONG) * 4
    x.flat[:6] = [0.0, -3.0, 3.0, 30.0, -30.0, 1e-4]
    check_parity(op, [x], attrs, domain=domain, opset=opset, dtypes=[dtype])


@pytest.mark.parametrize("op", ["Log", "Sqrt", "Reciprocal", "Exp"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_unary_on_bounded_inputs(op, dtype, rng):
    """Values in [0.2, 4): Exp's stay inside float16's range."""
    check_parity(op, [rng.uniform(0.2, 4.0, LONG)], dtypes=[dtype])


@pytest.mark.parametrize("op,attrs", GRADIENTS, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", DTYPES)
def test_gradient_ops_on_long_inputs(op, attrs, dtype, rng):
    x = rng.standard_normal(LONG) * 4
    x.flat[:4] = [-3.0, 3.0, 0.0, -1.0]
    check_parity(op, [rng.standard_normal(LONG), x], attrs, domain=MS, dtypes=[dtype])


@pytest.mark.parametrize("op", ["Pow", "Max", "Min", "PRelu", "Equal", "Less", "Greater", "LessOrEqual",
                                "GreaterOrEqual"])
@pytest.mark.parametrize("a_shape,b_shape", BROADCASTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_binary_broadcasting(op, a_shape, b_shape, dtype, rng):
    if op == "PRelu" and np.broadcast_shapes(a_shape, b_shape) != a_shape:
        pytest.skip("PRelu's slope broadcasts to X only")
    a = rng.uniform(0.5, 2.0, a_shape) if op == "Pow" else rng.integers(-2, 3, a_shape).astype(np.float64)
    b = rng.standard_normal(b_shape) if op == "Pow" else rng.integers(-2, 3, b_shape).astype(np.float64)
    check_parity(op, [a, b], dtypes=[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_min_of_three_inputs_and_of_one(dtype, rng):
    for op in ("Max", "Min"):
        check_parity(op, [rng.standard_normal((2, 3, 4)), rng.standard_normal(4), rng.standard_normal((3, 1))],
                     dtypes=[dtype])
        check_parity(op, [rng.standard_normal((5, 7))], dtypes=[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_where_and_and_broadcast(dtype, rng):
    for c_shape, x_shape, y_shape in [((3, 4), (3, 4), (3, 4)), ((3, 1), (4,), (2, 3, 4)), ((), (2, 3), (3,))]:
        check_parity("Where", [rng.random(c_shape) < 0.5, rng.standard_normal(x_shape), rng.standard_normal(y_shape)],
                     dtypes=[dtype])
    got = run_node("And", [rng.random((3, 1)) < 0.5, rng.random(4) < 0.5], provider="cuda")[0]
    assert got.dtype == np.bool_ and got.shape == (3, 4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_clip_bounds_stay_on_the_device(dtype, rng):
    """Clip-11's bounds given as device arrays (a session holds them there), each one absent."""
    provider = get_provider("cuda")
    x = rng.standard_normal(LONG).astype(dtype)
    for low, high in [(-0.5, 0.5), (None, 0.2), (-0.1, None), (None, None), (0.5, -0.5)]:
        bounds = [None if b is None else provider.from_numpy(np.array(b, dtype)) for b in (low, high)]
        (got,) = run_node("Clip", [x] + bounds, provider="cuda")
        got = got.get() if hasattr(got, "get") else got     # with device bounds the result stays there
        # the bounds as the kernel sees them: rounded to the data's type
        low, high = (None if b is None else float(np.array(b, dtype)) for b in (low, high))
        expected = np.clip(x.astype(np.float64), -np.inf if low is None else low, np.inf if high is None else high)
        if low is not None and high is not None and low > high:
            expected = np.full(x.shape, high)
        np.testing.assert_allclose(got.astype(np.float64), expected, rtol=1e-3 if dtype == "float16" else 1e-7)


@pytest.mark.parametrize("to", [1, 6, 7, 9, 10, 11])
@pytest.mark.parametrize("source", ["float16", "float32", "float64", "bool"])
def test_cast_every_pair(source, to, rng):
    x = rng.standard_normal((5, 33)) * 3
    x = (x > 0) if source == "bool" else x.astype(source)
    (expected,) = run_node("Cast", [x], attrs={"to": to})
    (got,) = run_node("Cast", [x], attrs={"to": to}, provider="cuda")
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("op", ["ReduceSumSquare", "ReduceL2"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_reductions_over_every_axis_set(op, dtype, rng):
    x = rng.standard_normal((3, 4, 70))
    for k in range(4):
        for axes in itertools.combinations(range(3), k):
            for keepdims in (0, 1):
                axes_input = np.array(axes, np.int64)
                check_parity(op, [x, axes_input], {"keepdims": keepdims}, dtypes=[dtype])
    check_parity(op, [x, np.zeros(0, np.int64)], {"noop_with_empty_axes": 1}, dtypes=[dtype])
    check_parity(op, [x], {"axes": [0, 2], "keepdims": 0}, opset=13, dtypes=[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_scale(dtype, rng):
    for down in (0, 1):
        check_parity("Scale", [rng.standard_normal(LONG), np.array(4.0)], {"scale_down": down}, domain=MS,
                     dtypes=[dtype])


def exported_model():
    """A torch CNN with the activations torch exports at opset 20 as single nodes."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    tn = torch.nn
    torch.manual_seed(0)
    model = tn.Sequential(tn.Conv2d(1, 4, 3, padding=1), tn.Hardswish(), tn.Conv2d(4, 4, 3, padding=1), tn.PReLU(4),
                          tn.Conv2d(4, 4, 3, padding=1), tn.GELU(approximate="tanh"), tn.Conv2d(4, 4, 3), tn.ELU(),
                          tn.Conv2d(4, 4, 3), tn.SiLU(), tn.Flatten(), tn.Linear(4 * 4 * 4, 10))
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(2, 1, 8, 8),), buffer, dynamo=False, opset_version=20,
                          training=torch.onnx.TrainingMode.TRAINING, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return buffer.getvalue()


def test_an_exported_model_trains_captured_on_the_gpu_as_on_the_cpu(rng):
    import onnx
    from minitrain.providers.cuda.capture.step_graph import capture_blocker
    from minitrain.training import TrainingSession
    data = [(rng.standard_normal((4, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 4)) for _ in range(3)]
    losses = {}
    for device in ("cpu", "cuda"):
        model = onnx.load_from_string(exported_model())
        session = TrainingSession.from_onnx(model, nn.CrossEntropyLoss(), optim.SGD(0.05), device=device, capture=True)
        losses[device] = [float(session.train_step(x, y)) for x, y in data]
    assert capture_blocker(session._train.plan, session._provider) is None
    np.testing.assert_allclose(losses["cuda"], losses["cpu"], rtol=1e-5)
