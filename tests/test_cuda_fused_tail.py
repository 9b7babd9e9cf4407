"""The tail of a CNN's CUDA step against the CPU kernels and against the unfused CUDA nodes:
GlobalAveragePoolActivationGrad, the 16-byte-pack paths of ActivationGradBias,
MaxPoolActivationGrad and MaxPool (1-D windows of two) beside their element-by-element paths
(planes whose length no pack divides), with ties and NaNs, in every element type.  dX keeps the
unfused nodes' bits; dB is reproducible from run to run."""
import numpy as np
import pytest
from cuda_parity import DTYPES, check_parity
from test_fusion import ACTS, bench_cases, fused_attrs, op_counts, tied_activations
from test_fusion_global_pool import GRAD_ACTS, marker_of, pooled

from minitrain import nn, optim, run_node
from minitrain.ops.fused import ACTIVATIONS, FUSED_DOMAIN
from minitrain.training import TrainingSession

pytestmark = pytest.mark.cuda

MS = "com.microsoft"
FUSED = "GlobalAveragePoolActivationGrad"
# packs of every element type, a plane no pack divides, 2-D and 3-D planes, the 1D CNN's third layer
PLANES = [(4, 8, 256), (5, 3, 7), (3, 4, 6, 6), (2, 3, 2, 3, 5), (64, 64, 256), (3, 2, 1)]


def cuda(op, inputs, attrs=None, domain="", **kwargs):
    return run_node(op, inputs, attrs=attrs, domain=domain, provider="cuda", **kwargs)


@pytest.mark.parametrize("act,alpha", GRAD_ACTS)
@pytest.mark.parametrize("shape", PLANES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_global_average_pool_activation_grad(act, alpha, shape, dtype, rng):
    marker = marker_of(rng.standard_normal(shape), act, alpha)
    check_parity(FUSED, [rng.standard_normal(pooled(shape)), marker], fused_attrs(act, alpha), domain=FUSED_DOMAIN,
                 dtypes=[dtype])


@pytest.mark.parametrize("act,alpha", ACTS)
@pytest.mark.parametrize("shape", [(4, 8, 256), (5, 3, 7)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_global_average_pool_activation_grad_keeps_the_unfused_bits(act, alpha, shape, dtype, rng):
    """dX equals GlobalAveragePoolGrad's (or the whole-plane AveragePoolGrad's) spread gradient
    through the activation's gradient kernel, bit for bit; dB is the same on a second run."""
    marker = marker_of(rng.standard_normal(shape), act, alpha).astype(dtype)
    dy = rng.standard_normal(pooled(shape)).astype(dtype)
    attrs = None if alpha is None else {"alpha": alpha}
    spread = cuda("GlobalAveragePoolGrad", [dy, np.array(shape)], domain=MS)[0]
    whole = cuda("AveragePoolGrad", [dy], {"kernel_shape": list(shape[2:])}, output_shapes={"dX": shape})[0]
    np.testing.assert_array_equal(whole, spread)
    expected = cuda(ACTIVATIONS[act], [spread, marker], attrs, domain=MS)[0]
    dx, db = cuda(FUSED, [dy, marker], fused_attrs(act, alpha), domain=FUSED_DOMAIN)
    np.testing.assert_array_equal(dx, expected)
    np.testing.assert_array_equal(cuda(FUSED, [dy, marker], fused_attrs(act, alpha), domain=FUSED_DOMAIN)[1], db)


@pytest.mark.parametrize("shape", [(64, 64, 256), (5, 3, 7), (33, 37)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_activation_grad_bias_keeps_the_unfused_bits(shape, dtype, rng):
    dy, z = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    dx, db = cuda("ActivationGradBias", [dy, z], {"activation": "Relu"}, domain=FUSED_DOMAIN)
    np.testing.assert_array_equal(dx, cuda("ReluGrad", [dy, z], domain=MS)[0])
    np.testing.assert_array_equal(cuda("ActivationGradBias", [dy, z], {"activation": "Relu"},
                                       domain=FUSED_DOMAIN)[1], db)


def with_nans(rng, x, share=7):
    x = x.copy()
    x.reshape(-1)[rng.choice(x.size, x.size // share, replace=False)] = np.nan
    return x


# 1-D planes of even length (packs, with a tail of windows past the last whole pack), odd length
# (window by window), the 1D CNN's first two layers
PAIR_SHAPES = [(3, 5, 10), (2, 3, 12), (1, 1, 6), (2, 3, 9), (64, 16, 1024), (32, 32, 512)]


@pytest.mark.parametrize("shape", PAIR_SHAPES)
@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_max_pool_of_pairs(shape, storage_order, dtype, rng):
    """Ties, NaNs (a NaN wins, the later of two NaNs) and Indices as the CPU's MaxPool."""
    x = with_nans(rng, rng.integers(-3, 3, shape).astype(np.float64))
    attrs = {"kernel_shape": [2], "strides": [2], "storage_order": storage_order}
    check_parity("MaxPool", [x], attrs, dtypes=[dtype])
    check_parity("MaxPool", [x], attrs, outputs=["Y"], dtypes=[dtype])


@pytest.mark.parametrize("act,alpha", ACTS)
@pytest.mark.parametrize("shape", PAIR_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_max_pool_activation_grad_of_pairs(act, alpha, shape, dtype, rng):
    x = tied_activations(rng, shape, act, alpha)
    dy = rng.standard_normal(shape[:2] + (shape[2] // 2,))
    check_parity("MaxPoolActivationGrad", [dy, x], {"kernel_shape": [2], **fused_attrs(act, alpha)},
                 domain=FUSED_DOMAIN, dtypes=[dtype])


@pytest.mark.parametrize("shape", PAIR_SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_max_pool_activation_grad_of_pairs_keeps_the_unfused_bits(shape, dtype, rng):
    """dX as MaxPool's Indices, MaxPoolGrad and ReluGrad on CUDA give it, NaNs included."""
    x = with_nans(rng, tied_activations(rng, shape, "Relu", None)).astype(dtype)
    dy = rng.standard_normal(shape[:2] + (shape[2] // 2,)).astype(dtype)
    tiles = {"kernel_shape": [2], "strides": [2]}
    indices = cuda("MaxPool", [x], tiles, outputs=["Indices"])[0]
    spread = cuda("MaxPoolGrad", [dy, indices], tiles, output_shapes={"dX": shape})[0]
    expected = cuda("ReluGrad", [spread, x], domain=MS)[0]
    dx, db = cuda("MaxPoolActivationGrad", [dy, x], {"kernel_shape": [2], "activation": "Relu"}, domain=FUSED_DOMAIN)
    np.testing.assert_array_equal(dx, expected)
    np.testing.assert_array_equal(cuda("MaxPoolActivationGrad", [dy, x], {"kernel_shape": [2], "activation": "Relu"},
                                       domain=FUSED_DOMAIN)[1], db)


def test_cnn1d_plan_fuses_its_global_average_pool_gradient():
    bench_train = bench_cases()
    spec = bench_train.CASES["cnn1d_b64"]
    session = TrainingSession(bench_train.minitrain_model(spec), nn.CrossEntropyLoss(), optim.SGD(0.05),
                              input_shape=spec.input_shape[1:], device="cuda")
    counts = op_counts(session.train_plan.graph)
    assert counts[FUSED] == 1 and counts["MaxPoolActivationGrad"] == 2
    assert not {"AveragePoolGrad", "ActivationGradBias", "ReluGrad"} & set(counts)
