"""ClipGrad on CUDA (cuda/clip_grad.cu): against the CPU kernel in every element type, bounds
read from device memory or absent, and the exported MobileNetV2, whose ReLU6 gradients become
ClipGrad nodes, still training in one captured CUDA Graph.  Without a GPU, its CUDA plan is
checked with pycuda stubbed: the rule fires there, every node on the device."""
import numpy as np
import pytest
from cuda_parity import DTYPES, check_parity
from stubbed_cuda import run_stubbed
from test_clip_grad_fusion import BOUND_CASES, CHAIN_OPS, clip_grad_inputs
from test_fusion import op_counts

from minitrain.ops.fused import FUSED_DOMAIN

MOBILENET_PLAN = """
import json
from family_plans import exported_session, off_device
session = exported_session("mobilenet_v2", "training", "cuda")
plan = session.train_plan
counts = {}
for node in plan.graph.nodes:
    counts[node.op_type] = counts.get(node.op_type, 0) + 1
print(json.dumps([counts, off_device(plan, "cuda")]))
"""


def test_mobilenet_v2_relu6_gradient_fuses_on_the_device():
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    counts, off = run_stubbed(MOBILENET_PLAN)
    assert counts["ClipGrad"] == counts["Clip"] > 0 and not set(CHAIN_OPS) & set(counts)
    assert off == []


@pytest.mark.cuda
@pytest.mark.parametrize("bounds", BOUND_CASES)
@pytest.mark.parametrize("shape", [(7,), (64, 32, 16, 16), (3, 5, 9), (0, 4)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_clip_grad_matches_the_cpu(bounds, shape, dtype, rng):
    dy, x = clip_grad_inputs(rng, shape, np.float64, *bounds)
    inputs = [dy, x] + [None if b is None else np.array(b) for b in bounds]
    check_parity("ClipGrad", inputs, domain=FUSED_DOMAIN, dtypes=[dtype])


@pytest.mark.cuda
def test_clip_grad_reads_views_and_one_element_bounds(rng):
    dy, x = rng.standard_normal((6, 10)), rng.standard_normal((6, 10))
    check_parity("ClipGrad", [dy, x, np.array([-0.3]), np.array([0.4])], domain=FUSED_DOMAIN,
                 noncontiguous_inputs=True)


@pytest.mark.cuda
def test_mobilenet_v2_with_clip_grad_is_captured_and_replayed():
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from family_plans import INPUT, exported_session
    from model_families import CLASSES
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal(INPUT).astype(np.float32) * 2, rng.integers(0, CLASSES, INPUT[0])) for _ in range(5)]
    captured = exported_session("mobilenet_v2", "training", "cuda")
    plain = exported_session("mobilenet_v2", "training", "cuda", capture=False)
    counts = op_counts(captured.train_plan.graph)
    assert counts["ClipGrad"] == counts["Clip"] > 0 and not set(CHAIN_OPS) & set(counts)
    assert [s.provider for s in captured.train_plan.steps if s.provider != "cuda"] == []
    for x, y in data:
        np.testing.assert_allclose(captured.train_step(x, y), plain.train_step(x, y), rtol=1e-5)
    graphs = captured._train.graphs
    assert graphs.disabled is None
    assert graphs.stats["captures"] == 1 and graphs.stats["replays"] == len(data) - 3
