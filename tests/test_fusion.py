"""The fusion pass (minitrain/fusion/) and the fused ops (minitrain/ops/fused.py) on the CPU:
each fused op against the unfused nodes it replaces, its gradients against finite differences,
the rules' conditions (fetched values stay, providers must match), and whole training runs:
the fused plan gives the unfused plan's parameters after 20 SGD and Adam steps."""
import dataclasses
import importlib
import os
import sys

import numpy as np
import pytest

import minitrain
from minitrain import nn, optim, run_node
from minitrain.errors import OpAttributeError
from minitrain.fusion import fuse
from minitrain.fusion.rewrite import Rewrite
from minitrain.gradcheck import numeric_gradient
from minitrain.ops.fused import ACTIVATIONS, FUSED_DOMAIN
from minitrain.training import TrainingSession

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MS = "com.microsoft"
ACTS = [("Relu", None), ("Sigmoid", None), ("Tanh", None), ("LeakyRelu", 0.2)]


def unfused_activation(y, act, alpha):
    return run_node(act, [y], attrs=None if alpha is None else {"alpha": alpha})[0]


def fused_attrs(act, alpha, key="activation_alpha"):
    attrs = {"activation": act}
    if alpha is not None:
        attrs[key] = [alpha] if key == "activation_params" else alpha
    return attrs


# ------------------------------------------------------------------------------ fused ops
@pytest.mark.parametrize("act,alpha", ACTS)
@pytest.mark.parametrize("c_shape", [None, (5,), (1, 5), (4, 1), (4, 5)])
@pytest.mark.parametrize("trans", [(0, 0), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_gemm_is_gemm_then_activation(act, alpha, c_shape, trans, dtype, rng):
    a = rng.standard_normal((3, 4) if trans[0] else (4, 3)).astype(dtype)
    b = rng.standard_normal((5, 3) if trans[1] else (3, 5)).astype(dtype)
    inputs = [a, b] + ([rng.standard_normal(c_shape).astype(dtype)] if c_shape else [])
    gemm = {"transA": trans[0], "transB": trans[1], "alpha": 0.7, "beta": 1.5}
    expected = unfused_activation(run_node("Gemm", inputs, attrs=gemm)[0], act, alpha)
    got = run_node("FusedGemm", inputs, attrs={**gemm, **fused_attrs(act, alpha)}, domain=MS)[0]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("act,alpha", ACTS)
@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((2, 3, 9), (4, 3, 3), {"pads": [1, 1]}),
    ((2, 2, 7, 6), (6, 1, 3, 3), {"group": 2, "strides": [2, 1]}),
])
@pytest.mark.parametrize("bias", [True, False])
def test_fused_conv_is_conv_then_activation(act, alpha, x_shape, w_shape, attrs, bias, rng):
    inputs = [rng.standard_normal(x_shape), rng.standard_normal(w_shape)]
    if bias:
        inputs.append(rng.standard_normal(w_shape[0]))
    expected = unfused_activation(run_node("Conv", inputs, attrs=attrs)[0], act, alpha)
    got = run_node("FusedConv", inputs, attrs={**attrs, **fused_attrs(act, alpha, "activation_params")}, domain=MS)[0]
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("act,alpha", ACTS)
@pytest.mark.parametrize("shape", [(6, 5), (3, 4, 7), (2, 3, 4, 5)])
def test_activation_grad_bias_is_gradient_then_bias_sum(act, alpha, shape, rng):
    dy, z = rng.standard_normal(shape), rng.standard_normal(shape)
    marker = z if act == "Relu" else unfused_activation(z, act, alpha)
    attrs = None if alpha is None else {"alpha": alpha}
    dx = run_node(ACTIVATIONS[act], [dy, marker], attrs=attrs, domain=MS)[0]
    if len(shape) == 2:
        db = run_node("SumToShape", [dx, np.array([shape[1]])], domain=MS)[0]
    else:
        w = np.zeros((shape[1], 2) + (1,) * (len(shape) - 2))
        db = run_node("ConvGrad", [dx, np.zeros((shape[0], 2) + shape[2:]), w], domain=MS, outputs=["dB"])[0]
    got_dx, got_db = run_node("ActivationGradBias", [dy, marker], attrs=fused_attrs(act, alpha), domain=FUSED_DOMAIN)
    np.testing.assert_array_equal(got_dx, dx)
    np.testing.assert_array_equal(got_db, db)


# (X shape, kernel_shape): 1-D to 3-D, sizes the windows do not cover (a tail that gets 0)
POOL_CASES = [((2, 3, 8), [2]), ((2, 3, 9, 7), [2, 2]), ((1, 2, 6, 6), [3, 2]), ((2, 2, 4, 5, 4), [2, 2, 2])]


def pool_then_gradient(dy, x, kernel, act, alpha, marker=None):
    """MaxPool's Indices, MaxPoolGrad, the activation's gradient reading `marker` (default x)
    and the bias sum: the nodes MaxPoolActivationGrad replaces."""
    pool_attrs = {"kernel_shape": kernel, "strides": kernel}
    indices = run_node("MaxPool", [x], attrs=pool_attrs, outputs=["Indices"])[0]
    pooled = run_node("MaxPoolGrad", [dy, indices], attrs=pool_attrs, output_shapes={"dX": x.shape})[0]
    grad = run_node(ACTIVATIONS[act], [pooled, x if marker is None else marker],
                    attrs=None if alpha is None else {"alpha": alpha}, domain=MS)[0]
    return grad, grad.sum(axis=(0,) + tuple(range(2, x.ndim)))


def tied_activations(rng, shape, act, alpha):
    """An activation's output with many exact ties inside windows (zeros of a Relu among them)."""
    return unfused_activation(rng.integers(-2, 3, size=shape).astype(np.float64), act, alpha)


@pytest.mark.parametrize("act,alpha", ACTS)
@pytest.mark.parametrize("shape,kernel", POOL_CASES)
def test_max_pool_activation_grad_is_pool_grad_then_gradient(act, alpha, shape, kernel, rng):
    x = tied_activations(rng, shape, act, alpha)
    pooled = run_node("MaxPool", [x], attrs={"kernel_shape": kernel, "strides": kernel})[0]
    dy = rng.standard_normal(pooled.shape)
    dx, db = run_node("MaxPoolActivationGrad", [dy, x], attrs={"kernel_shape": kernel, **fused_attrs(act, alpha)},
                      domain=FUSED_DOMAIN)
    expected_dx, expected_db = pool_then_gradient(dy, x, kernel, act, alpha)
    np.testing.assert_array_equal(dx, expected_dx)
    np.testing.assert_allclose(db, expected_db, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("act,alpha", ACTS)
@pytest.mark.parametrize("shape,kernel", POOL_CASES[:2])
def test_max_pool_activation_grad_against_finite_differences(act, alpha, shape, kernel, rng):
    """dX and dB are the gradients of sum(dY * MaxPool(act(Z + b))) in Z and b."""
    z = rng.standard_normal(shape)
    z[np.abs(z) < 1e-3] = 0.5        # away from Relu's kink
    b = rng.standard_normal(shape[1]) * 0.1
    along = (1, -1) + (1,) * (len(shape) - 2)
    pool_attrs = {"kernel_shape": kernel, "strides": kernel}
    dy = rng.standard_normal(run_node("MaxPool", [z], attrs=pool_attrs)[0].shape)

    def loss(zz, bb):
        return float(np.sum(dy * run_node("MaxPool", [unfused_activation(zz + bb.reshape(along), act, alpha)],
                                          attrs=pool_attrs)[0]))
    x = unfused_activation(z + b.reshape(along), act, alpha)
    dx, db = run_node("MaxPoolActivationGrad", [dy, x], attrs={"kernel_shape": kernel, **fused_attrs(act, alpha)},
                      domain=FUSED_DOMAIN)
    np.testing.assert_allclose(dx, numeric_gradient(lambda a: loss(a[0], b), [z.copy()]), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(db, numeric_gradient(lambda a: loss(z, a[0]), [b.copy()]), rtol=1e-6, atol=1e-8)


def test_max_pool_activation_grad_checks_dy_against_x(rng):
    x = rng.standard_normal((2, 3, 8, 8))
    attrs = {"kernel_shape": [2, 2], "activation": "Relu"}
    with pytest.raises(ValueError, match=r"MaxPoolActivationGrad.*'dY' has shape \(2, 3, 3, 4\).*\(2, 3, 4, 4\)"):
        run_node("MaxPoolActivationGrad", [np.ones((2, 3, 3, 4)), x], attrs=attrs, domain=FUSED_DOMAIN)
    with pytest.raises(OpAttributeError, match=r"MaxPoolActivationGrad.*'kernel_shape'=\(2,\) must have one entry"):
        run_node("MaxPoolActivationGrad", [np.ones((2, 3, 4, 4)), x], attrs={"kernel_shape": [2], "activation": "Relu"},
                 domain=FUSED_DOMAIN)


SCE_CASES = [
    ({"reduction": "mean"}, (6, 5), False),
    ({"reduction": "sum"}, (6, 5), False),
    ({"reduction": "none"}, (6, 5), False),
    ({"reduction": "mean", "ignore_index": 2}, (6, 5), True),
    ({"reduction": "mean"}, (3, 4, 2, 3), True),
    ({"reduction": "none", "ignore_index": 0}, (3, 4, 5), False),
]


def sce_inputs(rng, shape, weighted, label_dtype=np.int64):
    scores = rng.standard_normal(shape)
    labels = rng.integers(0, shape[1], size=(shape[0],) + shape[2:]).astype(label_dtype)
    weights = rng.uniform(0.5, 2, size=shape[1]) if weighted else None
    return scores, labels, weights


@pytest.mark.parametrize("attrs,shape,weighted", SCE_CASES)
@pytest.mark.parametrize("label_dtype", [np.int64, np.int32])
def test_sce_with_grad_is_loss_then_gradient(attrs, shape, weighted, label_dtype, rng):
    scores, labels, weights = sce_inputs(rng, shape, weighted, label_dtype)
    dy = np.array(0.75) if attrs["reduction"] != "none" else rng.standard_normal(labels.shape)
    loss, log_prob = run_node("SoftmaxCrossEntropyLoss", [scores, labels, weights], attrs=attrs)
    d_logits = run_node("SoftmaxCrossEntropyLossGrad", [dy, log_prob, labels, weights], attrs=attrs, domain=MS)[0]
    inputs = [scores, labels, dy] + ([weights] if weighted else [])
    got_loss, got_grad = run_node("SoftmaxCrossEntropyLossWithGrad", inputs, attrs=attrs, domain=FUSED_DOMAIN)
    np.testing.assert_array_equal(got_loss, loss)
    np.testing.assert_array_equal(got_grad, d_logits)


# ------------------------------------------------------------------------------ gradients
@pytest.mark.parametrize("act,alpha", ACTS)
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5)])
def test_activation_grad_bias_against_finite_differences(act, alpha, shape, rng):
    """dX and dB are the gradients of sum(dY * act(Z + b)) in Z and b (b along axis 1)."""
    z, dy = rng.standard_normal(shape), rng.standard_normal(shape)
    z[np.abs(z) < 1e-3] = 0.5        # away from Relu's kink
    b = rng.standard_normal(shape[1]) * 0.1
    along = (1, -1) + (1,) * (len(shape) - 2)

    def loss_z(zz):
        return float(np.sum(dy * unfused_activation(zz + b.reshape(along), act, alpha)))

    def loss_b(bb):
        return float(np.sum(dy * unfused_activation(z + bb.reshape(along), act, alpha)))
    pre = z + b.reshape(along)
    marker = pre if act == "Relu" else unfused_activation(pre, act, alpha)
    dx, db = run_node("ActivationGradBias", [dy, marker], attrs=fused_attrs(act, alpha), domain=FUSED_DOMAIN)
    np.testing.assert_allclose(dx, numeric_gradient(lambda a: loss_z(a[0]), [z.copy()]), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(db, numeric_gradient(lambda a: loss_b(a[0]), [b.copy()]), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("attrs,shape,weighted", SCE_CASES)
def test_sce_with_grad_against_finite_differences(attrs, shape, weighted, rng):
    """d_logits is dY times the gradient of the fused op's own loss output."""
    scores, labels, weights = sce_inputs(rng, shape, weighted)
    dy = np.array(0.75) if attrs["reduction"] != "none" else rng.standard_normal(labels.shape)
    extra = [weights] if weighted else []

    def loss(s):
        return float(np.sum(dy * run_node("SoftmaxCrossEntropyLossWithGrad", [s, labels, dy] + extra, attrs=attrs,
                                          domain=FUSED_DOMAIN)[0]))
    d_logits = run_node("SoftmaxCrossEntropyLossWithGrad", [scores, labels, dy] + extra, attrs=attrs,
                        domain=FUSED_DOMAIN)[1]
    np.testing.assert_allclose(d_logits, numeric_gradient(lambda a: loss(a[0]), [scores.copy()]), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape,weighted", [((6, 5), False), ((3, 4, 2, 3), True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sce_with_grad_with_ignored_labels_against_torch(reduction, shape, weighted, dtype, rng):
    """Labels equal to ignore_index (-100, as torch exports it) lie outside [0, C): they count
    nothing in the loss, its mean and the gradient."""
    torch = pytest.importorskip("torch")
    scores, labels, weights = sce_inputs(rng, shape, weighted)
    scores = scores.astype(dtype)
    weights = None if weights is None else weights.astype(dtype)
    labels.reshape(-1)[::3] = -100
    dy = np.array(0.75, dtype) if reduction != "none" else rng.standard_normal(labels.shape).astype(dtype)
    attrs = {"reduction": reduction, "ignore_index": -100}
    loss, d_logits = run_node("SoftmaxCrossEntropyLossWithGrad", [scores, labels, dy] + ([weights] if weighted else []),
                              attrs=attrs, domain=FUSED_DOMAIN)
    s = torch.tensor(scores, requires_grad=True)
    expected = torch.nn.functional.cross_entropy(s, torch.tensor(labels), None if weights is None else
                                                 torch.tensor(weights), ignore_index=-100, reduction=reduction)
    expected.backward(torch.tensor(dy))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(loss, expected.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(d_logits, s.grad.numpy(), rtol=tol, atol=tol)


def test_sce_with_grad_names_a_label_out_of_range(rng):
    scores, labels, _ = sce_inputs(rng, (4, 3), False)
    labels[2] = 3
    with pytest.raises(ValueError, match=r"SoftmaxCrossEntropyLossWithGrad.*'labels' holds 3, outside \[0, 3\)"):
        run_node("SoftmaxCrossEntropyLossWithGrad", [scores, labels, np.array(1.0)], attrs={"ignore_index": -100},
                 domain=FUSED_DOMAIN)


# ------------------------------------------------------------------------------ bad input
def test_unknown_activation_is_refused(rng):
    a = rng.standard_normal((2, 2))
    with pytest.raises(OpAttributeError, match=r"FusedGemm.*'activation'='Gelu'"):
        run_node("FusedGemm", [a, a], attrs={"activation": "Gelu"}, domain=MS)
    with pytest.raises(OpAttributeError, match=r"ActivationGradBias.*required attribute 'activation'"):
        run_node("ActivationGradBias", [a, a], domain=FUSED_DOMAIN)


def test_sce_with_grad_checks_the_seed_shape(rng):
    scores, labels, _ = sce_inputs(rng, (4, 3), False)
    with pytest.raises(ValueError, match=r"SoftmaxCrossEntropyLossWithGrad.*'dY'.*scalar"):
        run_node("SoftmaxCrossEntropyLossWithGrad", [scores, labels, np.ones(4)], domain=FUSED_DOMAIN)


# ------------------------------------------------------------------------------ the rules
def mlp_session(fuse_on=False, **kwargs):
    minitrain.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Relu(), nn.Linear(8, 3))
    return TrainingSession(model, nn.CrossEntropyLoss(), optim.SGD(0.1), input_shape=(6,), fuse=fuse_on, **kwargs)


def op_counts(graph):
    counts = {}
    for node in graph.nodes:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def test_fuse_rewrites_a_copy():
    session = mlp_session()
    graph = session.train_plan.graph
    before = [(n.op_type, list(n.inputs), list(n.outputs)) for n in graph.nodes]
    fused = fuse(graph, session.train_plan.fetch)
    assert [(n.op_type, list(n.inputs), list(n.outputs)) for n in graph.nodes] == before
    counts = op_counts(fused)
    assert counts["FusedGemm"] == 1 and counts["ActivationGradBias"] == 1
    assert counts["SoftmaxCrossEntropyLossWithGrad"] == 1
    assert not {"Relu", "ReluGrad", "SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad"} & set(counts)
    relu_input = next(n for n in graph.nodes if n.op_type == "Relu").outputs[0]
    assert relu_input in {x for n in fused.nodes if n.op_type == "ActivationGradBias" for x in n.inputs}


def test_fetched_values_are_never_fused_away():
    session = mlp_session()
    graph = session.train_plan.graph
    gemm_out = next(n for n in graph.nodes if n.op_type == "Relu").inputs[0]
    log_prob = next(n for n in graph.nodes if n.op_type == "SoftmaxCrossEntropyLoss").outputs[1]
    grad = next(n for n in graph.nodes if n.op_type == "ReluGrad").outputs[0]
    counts = op_counts(fuse(graph, session.train_plan.fetch + [gemm_out, log_prob, grad]))
    assert "FusedGemm" not in counts and "SoftmaxCrossEntropyLossWithGrad" not in counts
    assert counts["ActivationGradBias"] == 1         # its dX is still produced, so it may fuse


def test_no_fusion_across_providers(monkeypatch):
    """A fused op whose kernel is on another provider than the nodes it replaces is not used."""
    session = mlp_session()
    real = Rewrite.kernel_for

    def fused_elsewhere(self, op_type, domain, dtype):
        kdef = real(self, op_type, domain, dtype)
        fused = op_type.startswith("Fused") or domain == FUSED_DOMAIN
        return dataclasses.replace(kdef, provider="cuda") if fused else kdef
    monkeypatch.setattr(Rewrite, "kernel_for", fused_elsewhere)
    fused = fuse(session.train_plan.graph, session.train_plan.fetch)
    assert len(fused.nodes) == len(session.train_plan.graph.nodes)


def conv_pool_session(pool_attrs, pooled_features=36):
    minitrain.random.seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Relu(), nn.MaxPool2d(**pool_attrs), nn.Flatten(),
                          nn.Linear(pooled_features, 3))
    return TrainingSession(model, nn.CrossEntropyLoss(), optim.SGD(0.1), input_shape=(1, 8, 8))


@pytest.fixture
def as_if_on_cuda(monkeypatch):
    """The rules see every kernel the CPU has as a CUDA kernel, none a reference kernel (the
    MaxPool rule needs a MaxPoolActivationGrad that is not one)."""
    real = Rewrite.kernel_for

    def on_cuda(self, op_type, domain, dtype):
        kdef = real(self, op_type, domain, dtype)
        return None if kdef is None else dataclasses.replace(kdef, provider="cuda", reference=False)
    monkeypatch.setattr(Rewrite, "kernel_for", on_cuda)


def test_max_pool_gradient_never_fuses_into_a_reference_kernel():
    session = conv_pool_session({"kernel_size": 2})
    kernel, = [k for k in minitrain.registered_kernels("MaxPoolActivationGrad") if k.provider == "cpu"]
    assert kernel.reference
    assert "MaxPoolActivationGrad" not in op_counts(fuse(session.train_plan.graph, session.train_plan.fetch))


def test_max_pool_gradient_fuses_where_windows_tile_and_indices_go(as_if_on_cuda):
    session = conv_pool_session({"kernel_size": 2})
    fused = fuse(session.train_plan.graph, session.train_plan.fetch)
    counts = op_counts(fused)
    assert counts["MaxPoolActivationGrad"] == 1 and "MaxPoolGrad" not in counts and "ReluGrad" not in counts
    pool = next(n for n in fused.nodes if n.op_type == "MaxPool")
    assert pool.outputs[1:] == [""]
    grad = next(n for n in fused.nodes if n.op_type == "MaxPoolActivationGrad")
    assert grad.inputs[1] == pool.inputs[0] and len(grad.outputs) == 2     # reads X; gives the conv's dB


def test_max_pool_gradient_stays_for_overlapping_windows_or_fetched_indices(as_if_on_cuda):
    session = conv_pool_session({"kernel_size": 3, "stride": 2}, 16)
    assert "MaxPoolActivationGrad" not in op_counts(fuse(session.train_plan.graph, session.train_plan.fetch))
    session = conv_pool_session({"kernel_size": 2})
    graph = session.train_plan.graph
    indices = next(n for n in graph.nodes if n.op_type == "MaxPool").outputs[1]
    fused = fuse(graph, session.train_plan.fetch + [indices])
    assert op_counts(fused)["MaxPoolActivationGrad"] == 1
    assert next(n for n in fused.nodes if n.op_type == "MaxPool").outputs[1] == indices


def test_session_fuses_by_default_and_shows_it():
    assert not mlp_session().fuse
    minitrain.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Relu(), nn.Linear(8, 3))
    assert TrainingSession(model, nn.CrossEntropyLoss(), optim.SGD(0.1), input_shape=(6,)).fuse
    session = mlp_session(fuse_on=True)
    assert "FusedGemm" in session.plan_description()
    assert "0.Gemm+1.Relu" in session.plan_description()


# ------------------------------------------------------------------------------ Relu and MaxPool swapped
POOLS = [
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},      # overlapping windows
    {"kernel_shape": [3], "strides": [1]},
]


def pool_input(rng, attrs):
    """Values with ties, zeros and windows that hold no positive value."""
    shape = (2, 3, 7, 6) if len(attrs["kernel_shape"]) == 2 else (2, 3, 11)
    z = rng.integers(-3, 3, size=shape).astype(np.float64) * 0.5
    z[0, 0] = -1.0
    return z


@pytest.mark.parametrize("attrs", POOLS)
def test_max_pool_then_relu_gives_relu_then_max_pool(attrs, rng):
    """The swapped pair: the same pooled values, and the same dZ in every element."""
    z = pool_input(rng, attrs)
    r = run_node("Relu", [z])[0]
    p, indices = run_node("MaxPool", [r], attrs=attrs)
    dp = rng.standard_normal(p.shape)
    dz = run_node("ReluGrad", [run_node("MaxPoolGrad", [dp, indices], attrs=attrs,
                                        output_shapes={"dX": z.shape})[0], z], domain=MS)[0]
    q, swapped_indices = run_node("MaxPool", [z], attrs=attrs)
    np.testing.assert_array_equal(run_node("Relu", [q])[0], p)
    dq = run_node("ReluGrad", [dp, p], domain=MS)[0]
    got = run_node("MaxPoolGrad", [dq, swapped_indices], attrs=attrs, output_shapes={"dX": z.shape})[0]
    np.testing.assert_array_equal(got, dz)


@pytest.mark.parametrize("attrs", POOLS)
def test_swapped_relu_max_pool_gradient_against_finite_differences(attrs, rng):
    """dZ of the swapped pair is the gradient of sum(dP * MaxPool(Relu(Z))) (Z away from ties
    and from 0, where the function has kinks)."""
    shape = pool_input(rng, attrs).shape
    z = rng.permutation(np.arange(np.prod(shape), dtype=np.float64) - np.prod(shape) / 3).reshape(shape) * 0.01
    z[np.abs(z) < 0.005] = 0.5
    dp = rng.standard_normal(run_node("MaxPool", [z], attrs=attrs)[0].shape)

    def loss(zz):
        return float(np.sum(dp * run_node("MaxPool", [run_node("Relu", [zz])[0]], attrs=attrs)[0]))
    q, indices = run_node("MaxPool", [z], attrs=attrs)
    dq = run_node("ReluGrad", [dp, run_node("Relu", [q])[0]], domain=MS)[0]
    dz = run_node("MaxPoolGrad", [dq, indices], attrs=attrs, output_shapes={"dX": z.shape})[0]
    np.testing.assert_allclose(dz, numeric_gradient(lambda a: loss(a[0]), [z.copy()], eps=1e-4), rtol=1e-6, atol=1e-8)


def conv_relu_pool_session(fuse_on, pool=nn.MaxPool2d(3, stride=2, padding=1), capture=True):
    minitrain.random.seed(0)
    model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.Relu(), pool, nn.Flatten(), nn.Linear(36, 5))
    return model, TrainingSession(model, nn.CrossEntropyLoss(), optim.SGD(0.1), input_shape=(2, 8, 8),
                                  fuse=fuse_on, capture=capture)


def test_relu_moves_after_max_pool_in_the_training_plan():
    _, session = conv_relu_pool_session(True)
    nodes = session.train_plan.graph.nodes
    producer = {o: n for n in nodes for o in n.outputs}
    pool = next(n for n in nodes if n.op_type == "MaxPool")
    relu = next(n for n in nodes if n.op_type == "Relu")
    pool_grad = next(n for n in nodes if n.op_type == "MaxPoolGrad")
    relu_grad = next(n for n in nodes if n.op_type == "ReluGrad")
    assert producer[pool.inputs[0]].op_type == "Conv" and relu.inputs == [pool.outputs[0]]
    assert relu_grad.inputs[1] == relu.outputs[0] and pool_grad.inputs == [relu_grad.outputs[0], pool.outputs[1]]
    assert producer[next(n for n in nodes if n.op_type == "ConvGrad").inputs[0]] is pool_grad


@pytest.mark.parametrize("pool", [nn.MaxPool2d(3, stride=2, padding=1), nn.MaxPool2d(2)])
def test_swapped_relu_max_pool_trains_bitwise_the_same(pool, rng):
    x = np.round(rng.standard_normal((6, 2, 8, 8)), 1).astype(np.float32)    # ties in the windows
    y = rng.integers(0, 5, size=6)
    params = []
    for fuse_on in (False, True):
        model, session = conv_relu_pool_session(fuse_on, pool)
        losses = [session.train_step(x, y) for _ in range(10)]
        session.pull()
        params.append((losses, {k: np.array(v) for k, v in model.named_parameters()}))
    assert params[0][0] == params[1][0]
    for name in params[0][1]:
        np.testing.assert_array_equal(params[1][1][name], params[0][1][name], err_msg=name)


def swap_count(graph, fetch, providers=("cpu",)):
    """MaxPool nodes reading a Relu's input directly after fusion (the rule applied)."""
    fused = fuse(graph, fetch, providers)
    relus = {n.inputs[0] for n in graph.nodes if n.op_type == "Relu"}
    return sum(1 for n in fused.nodes if n.op_type == "MaxPool" and n.inputs[0] in relus)


def test_relu_and_max_pool_stay_when_their_values_are_fetched_or_read_elsewhere(monkeypatch):
    _, session = conv_relu_pool_session(False)
    graph, fetch = session.train_plan.graph, session.train_plan.fetch
    relu = next(n for n in graph.nodes if n.op_type == "Relu")
    pool = next(n for n in graph.nodes if n.op_type == "MaxPool")
    assert swap_count(graph, fetch) == 1
    assert swap_count(graph, fetch + [relu.outputs[0]]) == 0            # the Relu output is fetched
    assert swap_count(graph, fetch + [pool.outputs[1]]) == 0            # the indices are fetched
    pool_grad = next(n for n in graph.nodes if n.op_type == "MaxPoolGrad")
    assert swap_count(graph, fetch + [pool_grad.outputs[0]]) == 0       # MaxPoolGrad's dX is fetched
    other = graph.copy()
    other.add_node("Identity", [relu.outputs[0]], ["relu_copy"])
    assert swap_count(other, fetch + ["relu_copy"]) == 0               # another node reads the Relu output
    real = Rewrite.provider_for
    monkeypatch.setattr(Rewrite, "provider_for", lambda self, op, domain, dtype: "cuda"
                        if op in ("Relu", "MaxPool") else real(self, op, domain, dtype))
    assert swap_count(graph, fetch) == 0                                # not on the CPU


# ------------------------------------------------------------------------------ training
def bench_cases():
    """bench/train.py as a module; sys.path restored whole afterwards (the script puts bench/ on it
    too, where its model_families.py would shadow the tests' own)."""
    saved = list(sys.path)
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        bench_train = importlib.import_module("train")
    finally:
        sys.path[:] = saved
    return bench_train


def train(make_model, loss, optimizer, input_shape, batches, fuse_on, dtype=np.float32, steps=20):
    minitrain.random.seed(0)
    model = make_model().to_dtype(dtype)
    session = TrainingSession(model, loss, optimizer(), input_shape=input_shape, fuse=fuse_on)
    for step in range(steps):
        x, y = batches[step % len(batches)]
        session.train_step(x.astype(dtype), y)
    session.pull()
    return session, {k: np.array(v) for k, v in model.named_parameters()}


def assert_same_training(make_model, loss, input_shape, batches, dtype, fused_ops):
    for optimizer in (lambda: optim.SGD(0.05), lambda: optim.Adam(1e-3)):
        _, plain = train(make_model, loss, optimizer, input_shape, batches, False, dtype)
        session, fused = train(make_model, loss, optimizer, input_shape, batches, True, dtype)
        assert fused_ops <= set(op_counts(session.train_plan.graph))
        tol = 1e-12 if dtype == np.float64 else 1e-5
        for name in plain:
            np.testing.assert_allclose(fused[name], plain[name], rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("case,fused_ops", [
    ("lenet5_b64", {"FusedGemm", "ActivationGradBias", "SoftmaxCrossEntropyLossWithGrad"}),
    ("cnn1d_b64", {"FusedConv", "ActivationGradBias", "SoftmaxCrossEntropyLossWithGrad"}),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bench_models_train_the_same_fused(case, fused_ops, dtype):
    bench_train = bench_cases()
    spec = bench_train.CASES[case]
    data = bench_train.make_inputs(spec)
    batches = [(data["x"][i:i + 8], data["labels"][i:i + 8]) for i in range(0, 32, 8)]
    assert_same_training(lambda: bench_train.minitrain_model(spec), nn.CrossEntropyLoss(), spec.input_shape[1:],
                         batches, dtype, fused_ops)


def example(name):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


@pytest.mark.parametrize("name,input_shape,loss,fused_ops", [
    ("lenet_digits", (1, 8, 8), nn.CrossEntropyLoss(), {"FusedGemm", "SoftmaxCrossEntropyLossWithGrad"}),
    ("cnn1d_mnist1d", (1, 40), nn.CrossEntropyLoss(), {"SoftmaxCrossEntropyLossWithGrad"}),
    ("convtranspose_autoencoder", (1, 8, 8), nn.MSELoss(), {"FusedConv", "ActivationGradBias"}),
])
def test_example_models_train_the_same_fused(name, input_shape, loss, fused_ops, rng):
    batches = []
    for _ in range(2):
        x = rng.standard_normal((6,) + input_shape).astype(np.float32)
        y = x if isinstance(loss, nn.MSELoss) else rng.integers(0, 10, size=6)
        batches.append((x, y))
    assert_same_training(example(name).build_model, loss, input_shape, batches, np.float64, fused_ops)
