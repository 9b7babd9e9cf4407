"""The fused ops and rules of the exported families' patterns on CUDA: FusedConv with Clip,
ActivationGradBias with HardSwish and BatchNormFold against the CPU kernels (float16/32/64,
bfloat16), and sessions on CUDA whose fused plans (folded BatchNorm, Conv + ReLU6, HardSwish's
gradient with its bias gradient) give the CPU session's results and stay captured."""
import numpy as np
import pytest
from cuda_parity import DTYPES, check_parity
from test_fusion import op_counts
from test_fusion_families import (
    HardSwish,
    ReLU6,
    batch_norm_inputs,
    conv_bn_layers,
    eval_ops,
    hard_swish_inputs,
    session,
)

from minitrain import nn
from minitrain.ops.fused import FUSED_DOMAIN

pytestmark = pytest.mark.cuda

MS = "com.microsoft"


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((4, 1, 28, 28), (6, 1, 5, 5), {"pads": [2, 2, 2, 2]}),
    ((4, 6, 14, 14), (16, 6, 5, 5), {}),
    ((2, 8, 9, 9), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),      # depthwise, as MobileNet's
    ((3, 8, 50), (16, 8, 5), {"pads": [2, 2]}),
])
@pytest.mark.parametrize("bounds", [(0.0, 6.0), (-0.25, 0.5)])
@pytest.mark.parametrize("bias", [True, False])
def test_fused_conv_clip(x_shape, w_shape, attrs, bounds, bias, rng, search):
    fan_in = int(np.prod(w_shape[1:]))
    inputs = [rng.standard_normal(x_shape) * 3, rng.standard_normal(w_shape) / np.sqrt(fan_in)]
    if bias:
        inputs.append(rng.standard_normal(w_shape[0]))
    check_parity("FusedConv", inputs, {**attrs, "activation": "Clip", "activation_params": list(bounds)}, domain=MS)


@pytest.mark.parametrize("shape", [(64, 120), (1024, 84), (5, 3, 7), (4, 6, 28, 28), (256, 6, 28, 28), (0, 4)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_activation_grad_bias_hard_swish(shape, dtype, rng):
    check_parity("ActivationGradBias", list(hard_swish_inputs(rng, shape)), {"activation": "HardSwish"},
                 domain=FUSED_DOMAIN, dtypes=[dtype])


@pytest.mark.parametrize("w_shape", [(6, 1, 5, 5), (16, 6, 5, 5), (32, 1, 3, 3), (8, 4, 3), (4, 2, 2, 2, 2),
                                     (3, 0, 3, 3)])
@pytest.mark.parametrize("bias", [True, False])
def test_batch_norm_fold(w_shape, bias, rng):
    inputs = [rng.standard_normal(w_shape)] + batch_norm_inputs(rng, w_shape[0])
    if bias:
        inputs.append(rng.standard_normal(w_shape[0]))
    check_parity("BatchNormFold", inputs, {"epsilon": 1e-3}, domain=FUSED_DOMAIN)


def test_folded_inference_on_cuda_matches_the_cpu(rng):
    """Conv + BatchNorm + Relu and Conv + BatchNorm: folded, fused and captured on CUDA, the
    eval outputs after training steps are the CPU session's (float32)."""
    x, y = rng.standard_normal((6, 2, 4, 4)).astype(np.float32), rng.integers(0, 3, 6)
    on_cuda, on_cpu = session(conv_bn_layers, (2, 4, 4), True, device="cuda"), session(conv_bn_layers, (2, 4, 4), True)
    counts = eval_ops(on_cuda)
    assert counts["BatchNormFold"] == 2 and "BatchNormalization" not in counts
    executor = on_cuda._eval_executor(with_loss=False)[0]
    assert all(step.provider == "cuda" for step in executor.plan.steps)
    for _ in range(3):
        on_cuda.train_step(x, y)
        on_cpu.train_step(x, y)
        expected = on_cpu.eval_step(x)
        np.testing.assert_allclose(on_cuda.eval_step(x), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    assert executor.graphs is not None and executor.graphs.stats["captures"] >= 1


def test_relu6_and_hard_swish_fuse_on_cuda(rng):
    def relu6_layers():
        return [nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), ReLU6(), nn.Flatten(), nn.Linear(48, 8),
                HardSwish(), nn.Linear(8, 3)]
    x, y = rng.standard_normal((5, 2, 4, 4)).astype(np.float32) * 2, rng.integers(0, 3, 5)
    on_cuda, on_cpu = session(relu6_layers, (2, 4, 4), True, device="cuda"), session(relu6_layers, (2, 4, 4), True)
    assert next(n for n in on_cuda.train_plan.graph.nodes if n.op_type == "ActivationGradBias").attrs["activation"] \
        == "HardSwish"
    fused = next(n for n in on_cuda._eval_executor(with_loss=False)[0].plan.graph.nodes if n.op_type == "FusedConv")
    assert fused.attrs["activation"] == "Clip"
    for _ in range(3):
        assert on_cuda.train_step(x, y) == pytest.approx(on_cpu.train_step(x, y), rel=1e-4)
    expected = on_cpu.eval_step(x)
    np.testing.assert_allclose(on_cuda.eval_step(x), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    assert "HardSwishGrad" not in op_counts(on_cuda.train_plan.graph)
