"""GlobalAveragePoolActivationGrad (fusion/global_average_pool_activation_grad.py) on the CPU: the
fused op against the unfused nodes it replaces, its gradients against finite differences, its
shape checks, the rule's conditions, and training with the rule applied (the CPU's reference
kernel standing in for CUDA's): the unfused plan's parameters after 10 SGD steps."""
import numpy as np
import pytest
import test_fusion
from test_fusion import ACTS, fused_attrs, op_counts, unfused_activation

import minitrain
from minitrain import nn, optim, run_node
from minitrain.fusion import fuse
from minitrain.gradcheck import numeric_gradient
from minitrain.ops.fused import ACTIVATIONS, FUSED_DOMAIN
from minitrain.training import TrainingSession

MS = "com.microsoft"
FUSED = "GlobalAveragePoolActivationGrad"
GRAD_ACTS = ACTS + [("HardSwish", None)]
as_if_on_cuda = test_fusion.as_if_on_cuda     # the fixture: the rules see the CPU's kernels as CUDA's
SHAPES = [(2, 3, 8), (3, 2, 4, 5), (2, 2, 3, 2, 4)]


def pooled(shape):
    return tuple(shape[:2]) + (1,) * (len(shape) - 2)


def marker_of(z, act, alpha):
    """What the activation's gradient reads: Relu's input, HardSwish's input, else the output."""
    return z if act in ("Relu", "HardSwish") else unfused_activation(z, act, alpha)


def unfused(dy, marker, act, alpha):
    """GlobalAveragePoolGrad, the activation's gradient and the bias sum: the nodes replaced."""
    spread = run_node("GlobalAveragePoolGrad", [dy, np.array(marker.shape)], domain=MS)[0]
    dx = run_node(ACTIVATIONS[act], [spread, marker], attrs=None if alpha is None else {"alpha": alpha}, domain=MS)[0]
    return dx, dx.sum(axis=(0,) + tuple(range(2, dx.ndim)))


@pytest.mark.parametrize("act,alpha", GRAD_ACTS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_op_is_pool_grad_then_gradient(act, alpha, shape, dtype, rng):
    marker = marker_of(rng.standard_normal(shape), act, alpha).astype(dtype)
    dy = rng.standard_normal(pooled(shape)).astype(dtype)
    dx, db = run_node(FUSED, [dy, marker], attrs=fused_attrs(act, alpha), domain=FUSED_DOMAIN)
    expected_dx, expected_db = unfused(dy, marker, act, alpha)
    assert dx.dtype == db.dtype == dtype and db.shape == (shape[1],)
    np.testing.assert_array_equal(dx, expected_dx)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(db, expected_db, rtol=tol, atol=tol)


def test_average_pool_grad_over_the_plane_spreads_the_same(rng):
    """The rule's other pool gradient: AveragePoolGrad whose window is the whole plane."""
    shape = SHAPES[1]
    dy = rng.standard_normal(pooled(shape))
    spread = run_node("AveragePoolGrad", [dy], attrs={"kernel_shape": list(shape[2:])}, output_shapes={"dX": shape})[0]
    np.testing.assert_allclose(spread, np.broadcast_to(dy / np.prod(shape[2:]), shape), rtol=1e-15)


@pytest.mark.parametrize("act,alpha", GRAD_ACTS)
@pytest.mark.parametrize("shape", SHAPES[:2])
def test_fused_op_against_finite_differences(act, alpha, shape, rng):
    """dX and dB are the gradients of sum(dY * GlobalAveragePool(act(Z + b))) in Z and b."""
    z = rng.standard_normal(shape)
    z[np.abs(z) < 1e-3] = 0.5        # away from Relu's kink
    z[np.abs(np.abs(z) - 3) < 1e-3] = 0.5     # and HardSwish's
    b = rng.standard_normal(shape[1]) * 0.1
    along = (1, -1) + (1,) * (len(shape) - 2)
    dy = rng.standard_normal(pooled(shape))

    def loss(zz, bb):
        return float(np.sum(dy * run_node("GlobalAveragePool", [unfused_activation(zz + bb.reshape(along), act,
                                                                                  alpha)])[0]))
    dx, db = run_node(FUSED, [dy, marker_of(z + b.reshape(along), act, alpha)], attrs=fused_attrs(act, alpha),
                      domain=FUSED_DOMAIN)
    np.testing.assert_allclose(dx, numeric_gradient(lambda a: loss(a[0], b), [z.copy()]), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(db, numeric_gradient(lambda a: loss(z, a[0]), [b.copy()]), rtol=1e-6, atol=1e-9)


def test_fused_op_checks_its_inputs(rng):
    x = rng.standard_normal((2, 3, 8))
    with pytest.raises(ValueError, match=rf"{FUSED}.*'dY' has shape \(2, 3, 2\).*\(2, 3, 1\)"):
        run_node(FUSED, [np.ones((2, 3, 2)), x], attrs={"activation": "Relu"}, domain=FUSED_DOMAIN)
    with pytest.raises(ValueError, match=rf"{FUSED}.*'X' has shape \(2, 3\)"):
        run_node(FUSED, [np.ones((2, 3)), np.ones((2, 3))], attrs={"activation": "Relu"}, domain=FUSED_DOMAIN)
    with pytest.raises(ValueError, match=rf"{FUSED}.*empty spatial axis"):
        run_node(FUSED, [np.ones((2, 3, 1)), np.ones((2, 3, 0))], attrs={"activation": "Relu"}, domain=FUSED_DOMAIN)
    with pytest.raises(ValueError, match=rf"{FUSED}.*'activation'='Clip'"):
        run_node(FUSED, [np.ones((2, 3, 1)), x], attrs={"activation": "Clip"}, domain=FUSED_DOMAIN)


# ------------------------------------------------------------------------------ the rule
def pool_model(pool, activation=nn.Relu, bias=True, dtype=np.float32):
    """Conv1d (2 -> 4 channels over 8 steps), an activation, `pool`, Flatten and Linear."""
    minitrain.random.seed(0)
    windows = 1 if isinstance(pool, nn.GlobalAvgPool) else 8 // pool.kernel_size
    return nn.Sequential(nn.Conv1d(2, 4, 3, padding=1, bias=bias), activation(), pool, nn.Flatten(),
                         nn.Linear(4 * windows, 3)).to_dtype(dtype)


def pool_session(pool, fuse_on=False, **kwargs):
    return TrainingSession(pool_model(pool, **kwargs), nn.CrossEntropyLoss(), optim.SGD(0.1), input_shape=(2, 8),
                           fuse=fuse_on)


@pytest.mark.parametrize("pool", [nn.AvgPool1d(8), nn.GlobalAvgPool()], ids=["whole-window", "global"])
@pytest.mark.parametrize("bias", [True, False])
def test_rule_fuses_a_global_average_pool_gradient(pool, bias, as_if_on_cuda):
    session = pool_session(pool, bias=bias)
    counts = op_counts(fuse(session.train_plan.graph, session.train_plan.fetch))
    assert counts[FUSED] == 1
    assert not {"AveragePoolGrad", "GlobalAveragePoolGrad", "ActivationGradBias", "ReluGrad"} & set(counts)


def test_rule_never_fuses_into_a_reference_kernel():
    kernel, = [k for k in minitrain.registered_kernels(FUSED) if k.provider == "cpu"]
    assert kernel.reference
    session = pool_session(nn.AvgPool1d(8))
    assert FUSED not in op_counts(fuse(session.train_plan.graph, session.train_plan.fetch))


def test_rule_leaves_windows_that_are_not_the_plane_and_fetched_gradients(as_if_on_cuda):
    session = pool_session(nn.AvgPool1d(4))
    counts = op_counts(fuse(session.train_plan.graph, session.train_plan.fetch))
    assert FUSED not in counts and counts["AveragePoolGrad"] == 1
    session = pool_session(nn.AvgPool1d(8))
    graph = session.train_plan.graph
    spread = next(n for n in graph.nodes if n.op_type == "AveragePoolGrad").outputs[0]
    counts = op_counts(fuse(graph, session.train_plan.fetch + [spread]))
    assert FUSED not in counts and counts["ActivationGradBias"] == 1


@pytest.mark.parametrize("pool", [nn.AvgPool1d(8), nn.GlobalAvgPool()], ids=["whole-window", "global"])
@pytest.mark.parametrize("activation", [nn.Relu, nn.Sigmoid])
def test_training_with_the_rule_matches_unfused(pool, activation, as_if_on_cuda, rng):
    batches = [(rng.standard_normal((6, 2, 8)), rng.integers(0, 3, size=6)) for _ in range(2)]
    params = {}
    for fuse_on in (False, True):
        model = pool_model(pool, activation, dtype=np.float64)
        session = TrainingSession(model, nn.CrossEntropyLoss(), optim.SGD(0.1), input_shape=(2, 8), fuse=fuse_on)
        for step in range(10):
            x, y = batches[step % 2]
            session.train_step(x, y)
        session.pull()
        if fuse_on:
            assert op_counts(session.train_plan.graph)[FUSED] == 1
        params[fuse_on] = {k: np.array(v) for k, v in model.named_parameters()}
    for name, value in params[False].items():
        np.testing.assert_array_equal(params[True][name], value, err_msg=name)
