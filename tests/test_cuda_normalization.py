"""BatchNormalization and BatchNormalizationGrad on CUDA against the CPU kernels: 0D-3D
spatial, training and inference mode, every output alone and together, large channels that
take several blocks each, data far from zero (the variance must not cancel), non-contiguous
and device inputs, 16-bit data with float32 parameters and statistics (mixed precision), and
bad input raising the CPU's errors."""
import numpy as np
import pytest

from cuda_parity import DTYPES, HALF_TYPES, TOLERANCE, check_parity
from minitrain import run_node
from minitrain.errors import DTypeError
from test_cuda_elementwise import assert_same_error

pytestmark = pytest.mark.cuda

MS = "com.microsoft"
SHAPES = [(5, 3), (3, 2, 7), (2, 3, 4, 5), (2, 2, 3, 2, 3), (64, 8, 33, 31), (2, 3, 100000), (300, 70)]
FORWARD_OUTPUTS = ["Y", "running_mean", "running_var", "saved_mean", "saved_inv_std"]


def inputs(shape, rng, offset=0.5, spread=2.0):
    c = shape[1]
    x = rng.standard_normal(shape) * spread + offset
    scale, bias = rng.standard_normal(c), rng.standard_normal(c)
    mean, var = rng.standard_normal(c), rng.random(c) + 0.5
    return [x, scale, bias, mean, var]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_training_forward_and_gradient(shape, dtype, rng):
    args = inputs(shape, rng)
    attrs = {"training_mode": 1, "momentum": 0.8, "epsilon": 1e-3}
    y, _, _, saved_mean, saved_inv_std = check_parity("BatchNormalization", args, attrs, outputs=FORWARD_OUTPUTS,
                                                      dtypes=[dtype])
    dy = rng.standard_normal(shape)
    # the CPU's own saved statistics, so that both providers differentiate at the same point
    cpu_stats = run_node("BatchNormalization", [a.astype(np.float32 if dtype in HALF_TYPES else dtype)
                                                for a in args], attrs=attrs, outputs=["saved_mean", "saved_inv_std"])
    check_parity("BatchNormalizationGrad", [dy, args[0], args[1], *cpu_stats], attrs, domain=MS, dtypes=[dtype])


@pytest.mark.parametrize("shape", SHAPES[:5], ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_inference_forward_and_gradient(shape, dtype, rng):
    args = inputs(shape, rng)
    attrs = {"epsilon": 1e-5}
    check_parity("BatchNormalization", args, attrs, outputs=["Y", "saved_mean", "saved_inv_std"], dtypes=[dtype])
    check_parity("BatchNormalization", args, attrs, outputs=["Y"], dtypes=[dtype])
    inv_std = 1 / np.sqrt(args[4] + 1e-5)
    check_parity("BatchNormalizationGrad", [rng.standard_normal(shape), args[0], args[1], args[3], inv_std], attrs,
                 domain=MS, dtypes=[dtype])


@pytest.mark.parametrize("outputs", [["dX"], ["dscale"], ["dbias"], ["dscale", "dbias"], ["dX", "dbias"]])
@pytest.mark.parametrize("training", [0, 1])
def test_gradient_outputs_alone(outputs, training, rng):
    args = inputs((4, 3, 5), rng)
    mean, inv_std = args[3], 1 / np.sqrt(args[4] + 1e-5)
    check_parity("BatchNormalizationGrad", [rng.standard_normal((4, 3, 5)), args[0], args[1], mean, inv_std],
                 {"training_mode": training}, domain=MS, outputs=outputs)


@pytest.mark.parametrize("outputs", [["Y"], ["running_var"], ["saved_inv_std", "Y"], ["running_mean", "saved_mean"]])
def test_forward_outputs_alone(outputs, rng):
    check_parity("BatchNormalization", inputs((6, 4, 9), rng), {"training_mode": 1}, outputs=outputs)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_variance_far_from_zero(dtype, rng):
    """Values around 1e4 with spread 1e-2: a sum of squares would cancel in float32."""
    args = inputs((16, 4, 40, 40), rng, offset=1e4, spread=1e-2)
    x = args[0].astype(dtype)
    _, _, rv, _, sis = run_node("BatchNormalization", [x] + [a.astype(dtype) for a in args[1:]],
                                attrs={"training_mode": 1, "momentum": 0.0}, provider="cuda")
    var = x.astype(np.float64).var(axis=(0, 2, 3))
    np.testing.assert_allclose(rv, var, rtol=1e-3 if dtype == "float32" else 1e-10)
    epsilon = float(np.float32(1e-5))     # ONNX's default, a float32 attribute
    np.testing.assert_allclose(sis, 1 / np.sqrt(var + epsilon), rtol=1e-3 if dtype == "float32" else 1e-10)


def test_non_contiguous_and_device_inputs(rng):
    args = inputs((4, 3, 6, 8), rng)
    attrs = {"training_mode": 1}
    check_parity("BatchNormalization", args, attrs, noncontiguous_inputs=True)
    stats = run_node("BatchNormalization", args, attrs=attrs, outputs=["saved_mean", "saved_inv_std"])
    dy = rng.standard_normal(args[0].shape)
    check_parity("BatchNormalizationGrad", [dy, args[0], args[1], *stats], attrs, domain=MS,
                 noncontiguous_inputs=True)
    from minitrain.providers import get_provider
    cuda = get_provider("cuda")
    device_args = [cuda.from_numpy(a) for a in args]
    results = run_node("BatchNormalization", device_args, attrs=attrs, provider="cuda")
    assert all(cuda.is_native(r) for r in results)
    grads = run_node("BatchNormalizationGrad", [cuda.from_numpy(dy), device_args[0], device_args[1], *results[3:]],
                     attrs=attrs, domain=MS, provider="cuda")
    assert all(cuda.is_native(g) for g in grads)
    expected = run_node("BatchNormalizationGrad", [dy, args[0], args[1], *stats], attrs=attrs, domain=MS)
    for g, e in zip(grads, expected):
        np.testing.assert_allclose(cuda.to_numpy(g), e, rtol=1e-10, atol=1e-10)


def assert_mixed_parity(op, data, per_channel, attrs, outputs, data_outputs, domain=""):
    """The CUDA kernel on 16-bit `data` inputs and float32 `per_channel` ones against the CPU's
    float32 kernel on the same (16-bit-rounded) values: data outputs of the 16-bit type to its
    tolerance, per-channel outputs float32 to float32's."""
    low = data[0].dtype
    got = run_node(op, [*data, *per_channel], attrs=attrs, domain=domain, outputs=outputs, provider="cuda")
    expected = run_node(op, [*(a.astype(np.float32) for a in data), *per_channel], attrs=attrs, domain=domain,
                        outputs=outputs)
    for name, g, e in zip(outputs, got, expected):
        dtype = low if name in data_outputs else np.dtype(np.float32)
        assert g.dtype == dtype, (op, name, g.dtype)
        rtol, atol = TOLERANCE[dtype.name]
        scale = max(1.0, float(np.max(np.abs(e))))
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol * scale,
                                   err_msg=f"{op} {low} output {name}")
    return got


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", HALF_TYPES)
@pytest.mark.parametrize("training", [1, 0])
def test_half_data_with_float32_parameters(shape, dtype, training, rng):
    """X and dY float16 or bfloat16, scale, B and the statistics float32 (ONNX's T1 and T2): Y
    and dX in the data's type, the statistics, dscale and dbias in float32, as the CPU's float32
    kernel gives them from the same rounded data."""
    x, *per_channel = inputs(shape, rng)
    x = x.astype(dtype)
    per_channel = [a.astype(np.float32) for a in per_channel]
    attrs = {"training_mode": training, "momentum": 0.8, "epsilon": 1e-3}
    outputs = FORWARD_OUTPUTS if training else ["Y", "saved_mean", "saved_inv_std"]
    got = assert_mixed_parity("BatchNormalization", [x], per_channel, attrs, outputs, {"Y"})
    saved = got[-2:]
    dy = rng.standard_normal(shape).astype(dtype)
    assert_mixed_parity("BatchNormalizationGrad", [dy, x], [per_channel[0], *saved], attrs,
                        ["dX", "dscale", "dbias"], {"dX"}, domain=MS)
    assert_mixed_parity("BatchNormalizationGrad", [dy, x], [per_channel[0], *saved], attrs, ["dscale"], set(),
                        domain=MS)


def test_per_channel_types_no_kernel_serves(rng):
    """float16 data with float16 scale and B but float32 statistics: ONNX allows it, no CUDA
    kernel serves it, and the error names the inputs' types."""
    x, scale, bias, mean, var = inputs((2, 3, 4), rng)
    args = [x.astype(np.float16), scale.astype(np.float16), bias.astype(np.float16), mean.astype(np.float32),
            var.astype(np.float32)]
    with pytest.raises(DTypeError, match="scale float16, B float16, input_mean float32, input_var float32"):
        run_node("BatchNormalization", args, attrs={"training_mode": 1}, provider="cuda")


def test_bad_input_raises_the_cpu_errors(rng):
    x, scale, bias, mean, var = (a.astype(np.float32) for a in inputs((2, 3, 4), rng))
    assert_same_error("BatchNormalization", [x, np.ones(4, np.float32), bias, mean, var])
    assert_same_error("BatchNormalization", [x.reshape(-1), scale, bias, mean, var])
    assert_same_error("BatchNormalization", [x, scale, bias, mean, var], attrs={"momentum": 2.0})
    assert_same_error("BatchNormalization", [x, scale, bias, mean, var], attrs={"epsilon": 0.0})
    assert_same_error("BatchNormalization", [x, scale, bias, mean, var], outputs=["Y", "running_mean"])
    assert_same_error("BatchNormalization", [x, scale.astype(np.float64), bias, mean, var])
    assert_same_error("BatchNormalization", [x[:0], scale, bias, mean, var], attrs={"training_mode": 1})
    assert_same_error("BatchNormalizationGrad", [x[:, :, 0], x, scale, mean, var], domain=MS)
