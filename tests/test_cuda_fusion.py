"""The fused ops on CUDA against the CPU kernels (every activation, bias layout and loss
variant, float16/32/64), and fused training on CUDA against unfused training on CUDA: the
same parameters after 20 SGD and Adam steps of LeNet-5 and the 1D CNN of the benchmark."""
import numpy as np
import pytest
from cuda_parity import DTYPES, check_parity
from test_fusion import (
    ACTS,
    POOL_CASES,
    SCE_CASES,
    bench_cases,
    fused_attrs,
    op_counts,
    sce_inputs,
    tied_activations,
    unfused_activation,
)

import minitrain
from minitrain import nn, optim
from minitrain.ops.fused import FUSED_DOMAIN
from minitrain.training import TrainingSession

pytestmark = pytest.mark.cuda

MS = "com.microsoft"


@pytest.mark.parametrize("act,alpha", ACTS)
@pytest.mark.parametrize("c_shape", [None, (37,), (1, 37), (33, 1), (33, 37)])
@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1)])
def test_fused_gemm(act, alpha, c_shape, trans, rng):
    a = rng.standard_normal((20, 33) if trans[0] else (33, 20))
    b = rng.standard_normal((37, 20) if trans[1] else (20, 37))
    inputs = [a, b] + ([rng.standard_normal(c_shape)] if c_shape else [])
    attrs = {"transA": trans[0], "transB": trans[1], "alpha": 0.5, "beta": 2.0, **fused_attrs(act, alpha)}
    check_parity("FusedGemm", inputs, attrs, domain=MS)


@pytest.mark.parametrize("act,alpha", ACTS)
@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((4, 1, 28, 28), (6, 1, 5, 5), {"pads": [2, 2, 2, 2]}),         # LeNet's first layer (direct)
    ((4, 6, 14, 14), (16, 6, 5, 5), {}),                             # its second (im2col + GEMM)
    ((3, 8, 50), (16, 8, 5), {"pads": [2, 2]}),
    ((2, 4, 9), (6, 2, 3), {"group": 2, "strides": [2]}),
])
@pytest.mark.parametrize("bias", [True, False])
def test_fused_conv(act, alpha, x_shape, w_shape, attrs, bias, rng, search):
    fan_in = int(np.prod(w_shape[1:]))     # pre-activations of order 1: the activation does not shrink the scale
    inputs = [rng.standard_normal(x_shape), rng.standard_normal(w_shape) / np.sqrt(fan_in)]
    if bias:
        inputs.append(rng.standard_normal(w_shape[0]))
    check_parity("FusedConv", inputs, {**attrs, **fused_attrs(act, alpha, "activation_params")}, domain=MS)


@pytest.mark.parametrize("act,alpha", ACTS)
@pytest.mark.parametrize("shape", [(64, 120), (1024, 84), (5, 3, 7), (4, 6, 28, 28), (256, 6, 28, 28), (0, 4)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_activation_grad_bias(act, alpha, shape, dtype, rng):
    dy, z = rng.standard_normal(shape), rng.standard_normal(shape)
    marker = z if act == "Relu" else unfused_activation(z, act, alpha)
    check_parity("ActivationGradBias", [dy, marker], fused_attrs(act, alpha), domain=FUSED_DOMAIN, dtypes=[dtype])


@pytest.mark.parametrize("act,alpha", ACTS)
@pytest.mark.parametrize("shape,kernel", POOL_CASES + [((64, 6, 28, 28), [2, 2]), ((64, 16, 1024), [2])])
@pytest.mark.parametrize("dtype", DTYPES)
def test_max_pool_activation_grad(act, alpha, shape, kernel, dtype, rng):
    """Ties inside windows included: CUDA picks the maximum the CPU's MaxPool picks."""
    x = tied_activations(rng, shape, act, alpha)
    pooled = tuple(shape[:2]) + tuple(s // k for s, k in zip(shape[2:], kernel))
    check_parity("MaxPoolActivationGrad", [rng.standard_normal(pooled), x],
                 {"kernel_shape": kernel, **fused_attrs(act, alpha)}, domain=FUSED_DOMAIN, dtypes=[dtype])


@pytest.mark.parametrize("attrs,shape,weighted", SCE_CASES + [({"reduction": "mean"}, (1024, 10), False)])
@pytest.mark.parametrize("label_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sce_with_grad(attrs, shape, weighted, label_dtype, dtype, rng):
    scores, labels, weights = sce_inputs(rng, shape, weighted, label_dtype)
    dy = np.array(0.75) if attrs["reduction"] != "none" else rng.standard_normal(labels.shape)
    inputs = [scores, labels, dy] + ([weights] if weighted else [])
    check_parity("SoftmaxCrossEntropyLossWithGrad", inputs, attrs, domain=FUSED_DOMAIN, dtypes=[dtype])


def test_sce_with_grad_reports_a_bad_label(rng):
    from minitrain import run_node
    scores, labels, _ = sce_inputs(rng, (4, 3), False)
    labels[2] = 7
    with pytest.raises(ValueError, match=r"SoftmaxCrossEntropyLossWithGrad.*holds 7"):
        run_node("SoftmaxCrossEntropyLossWithGrad", [scores, labels, np.array(1.0)], domain=FUSED_DOMAIN,
                 provider="cuda")


def cuda_params(spec, bench_train, fuse_on, optimizer, dtype, batches):
    minitrain.random.seed(0)
    model = bench_train.minitrain_model(spec).to_dtype(dtype)
    session = TrainingSession(model, nn.CrossEntropyLoss(), optimizer(), input_shape=spec.input_shape[1:],
                              device="cuda", fuse=fuse_on)
    for step in range(20):
        x, y = batches[step % len(batches)]
        session.train_step(x.astype(dtype), y)
    session.pull()
    return session, {k: np.array(v) for k, v in model.named_parameters()}


@pytest.mark.parametrize("case", ["lenet5_b64", "cnn1d_b64"])
@pytest.mark.parametrize("optimizer", [lambda: optim.SGD(0.05), lambda: optim.Adam(1e-3)], ids=["sgd", "adam"])
def test_fused_training_on_cuda_matches_unfused(case, optimizer):
    """float64: the fused parameters are the unfused ones to 1e-12.  float32: the fused CUDA
    kernels round differently (a direct convolution adds its bias last, bias gradients sum in
    another order), and over 20 steps a ReLU near its kink or Adam's normalisation of tiny
    gradients can grow that in a single small tensor (3x in one bias of the 1D CNN under Adam);
    so over the whole model the fused float32 run must stay as close to the float64 run as the
    unfused float32 run is."""
    bench_train = bench_cases()
    spec = bench_train.CASES[case]
    data = bench_train.make_inputs(spec)
    batches = [(data["x"][i:i + 32], data["labels"][i:i + 32]) for i in (0, 32)]
    runs = {}
    for dtype in (np.float64, np.float32):
        for fuse_on in (False, None):
            session, params = cuda_params(spec, bench_train, fuse_on, optimizer, dtype, batches)
            runs[dtype, fuse_on] = params
            if fuse_on is None:
                assert session.fuse
                assert {"FusedConv", "MaxPoolActivationGrad"} <= set(op_counts(session.train_plan.graph))
                assert all(step.provider == "cuda" for step in session.train_plan.steps)
    reference = runs[np.float64, False]
    for name in reference:
        np.testing.assert_allclose(runs[np.float64, None][name], reference[name], rtol=1e-12, atol=1e-12, err_msg=name)

    def float32_error(fuse_on):
        return max(float(np.max(np.abs(runs[np.float32, fuse_on][name] - reference[name]))) for name in reference)
    assert float32_error(None) <= 2 * float32_error(False) + 1e-5, (float32_error(None), float32_error(False))
