"""Optimizer update kernels against NumPy references over several steps (and torch.optim where
installed), parameter groups, hyperparameter checks, gradient clipping and learning-rate schedules."""
import math

import numpy as np
import pytest

from minitrain import nn, run_node
from minitrain.errors import OpAttributeError, OptimizerArgumentError, ShapeError
from minitrain.optim import SGD, Adam, AdamW, CosineLR, LinearWarmup, StepLR, clip_grad_norm, global_norm

SHAPES = {"w": (4, 3), "b": (3,), "k": (2, 1, 3, 3)}


def _params(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(dtype) for n, s in SHAPES.items()}


def _grad_stream(dtype, steps, seed=1):
    rng = np.random.default_rng(seed)
    return [{n: rng.standard_normal(s).astype(dtype) * 3 for n, s in SHAPES.items()} for _ in range(steps)]


def _clip(grads, max_norm):
    if not max_norm:
        return grads
    norm = math.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads.values()))
    scale = min(1.0, max_norm / (norm + 1e-6))
    return {n: g * scale for n, g in grads.items()}


def reference_sgd(params, stream, lr, momentum=0.0, nesterov=False, weight_decay=0.0, max_norm=None,
                  lr_factor=lambda t: 1.0):
    p = {n: a.astype(np.float64) for n, a in params.items()}
    buf = {n: np.zeros_like(a) for n, a in p.items()}
    for t, grads in enumerate(stream):
        grads = _clip({n: g.astype(np.float64) for n, g in grads.items()}, max_norm)
        for n in p:
            d = grads[n] + weight_decay * p[n]
            if momentum:
                buf[n] = momentum * buf[n] + d
                d = d + momentum * buf[n] if nesterov else buf[n]
            p[n] = p[n] - lr * lr_factor(t) * d
    return p


def reference_adam(params, stream, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False,
                   max_norm=None):
    p = {n: a.astype(np.float64) for n, a in params.items()}
    m = {n: np.zeros_like(a) for n, a in p.items()}
    v = {n: np.zeros_like(a) for n, a in p.items()}
    for t, grads in enumerate(stream, start=1):
        grads = _clip({n: g.astype(np.float64) for n, g in grads.items()}, max_norm)
        for n in p:
            g = grads[n]
            if decoupled:
                p[n] = p[n] * (1 - lr * weight_decay)
            else:
                g = g + weight_decay * p[n]
            m[n] = betas[0] * m[n] + (1 - betas[0]) * g
            v[n] = betas[1] * v[n] + (1 - betas[1]) * g * g
            mhat, vhat = m[n] / (1 - betas[0] ** t), v[n] / (1 - betas[1] ** t)
            p[n] = p[n] - lr * mhat / (np.sqrt(vhat) + eps)
    return p


CASES = [
    ("sgd", lambda: SGD(0.05), dict(lr=0.05)),
    ("sgd_momentum_wd", lambda: SGD(lr=0.05, momentum=0.9, weight_decay=0.01), dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
    ("sgd_nesterov_clip", lambda: SGD(lr=0.05, momentum=0.9, nesterov=True, max_grad_norm=2.0),
     dict(lr=0.05, momentum=0.9, nesterov=True, max_norm=2.0)),
    ("adam", lambda: Adam(0.01), dict(lr=0.01)),
    ("adam_l2_clip", lambda: Adam(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05, max_grad_norm=1.0),
     dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05, max_norm=1.0)),
    ("adamw", lambda: AdamW(0.01, weight_decay=0.1), dict(lr=0.01, weight_decay=0.1, decoupled=True)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name,make,ref_kwargs", CASES, ids=[c[0] for c in CASES])
def test_optimizer_matches_numpy_reference(name, make, ref_kwargs, dtype):
    params = _params(dtype)
    start = {n: a.copy() for n, a in params.items()}
    stream = _grad_stream(dtype, 6)
    opt = make().attach(params)
    ids = {n: id(a) for n, a in params.items()}
    for grads in stream:
        opt.step(grads)
    reference = reference_adam if name.startswith("adam") else reference_sgd
    expected = reference(start, stream, **ref_kwargs)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    for n in params:
        assert id(opt.params[n]) == ids[n] and opt.params[n] is params[n], "updated in place"
        assert params[n].dtype == dtype
        np.testing.assert_allclose(params[n], expected[n], rtol=tol, atol=tol)
    assert opt.step_count == 6


def test_grad_norm_is_reported_before_clipping():
    params = _params(np.float64)
    grads = _grad_stream(np.float64, 1)[0]
    norm = SGD(0.1, max_grad_norm=0.5).attach(params).step(grads)
    expected = math.sqrt(sum(float(np.sum(g ** 2)) for g in grads.values()))
    assert norm == pytest.approx(expected, rel=1e-12)


def test_schedule_drives_the_learning_rate():
    params = _params(np.float64)
    start = {n: a.copy() for n, a in params.items()}
    stream = _grad_stream(np.float64, 5)
    sched = StepLR(2, gamma=0.5)
    opt = SGD(0.1, schedule=sched).attach(params)
    for grads in stream:
        opt.step(grads)
    expected = reference_sgd(start, stream, 0.1, lr_factor=sched)
    for n in params:
        np.testing.assert_allclose(params[n], expected[n], rtol=1e-12)


def test_against_torch_optim():
    torch = pytest.importorskip("torch")
    for make, tmake in [
        (lambda: SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
         lambda p: torch.optim.SGD(p, 0.1, 0.9, nesterov=True, weight_decay=0.01)),
        (lambda: Adam(0.01, weight_decay=0.01), lambda p: torch.optim.Adam(p, 0.01, weight_decay=0.01)),
        (lambda: AdamW(0.01, weight_decay=0.1), lambda p: torch.optim.AdamW(p, 0.01, weight_decay=0.1)),
    ]:
        params = _params(np.float64)
        tparams = [torch.tensor(a.copy(), requires_grad=True) for a in params.values()]
        opt, topt = make().attach(params), tmake(tparams)
        for grads in _grad_stream(np.float64, 5):
            for t, g in zip(tparams, grads.values()):
                t.grad = torch.tensor(g)
            opt.step(grads)
            topt.step()
        for a, t in zip(params.values(), tparams):
            np.testing.assert_allclose(a, t.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_clip_grad_norm_in_place():
    grads = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}
    norm = clip_grad_norm(grads, 1.0)
    assert norm == pytest.approx(5.0)
    assert global_norm(grads) == pytest.approx(1.0, rel=1e-6)
    np.testing.assert_allclose(grads["a"], [0.6, 0.0], rtol=1e-6)
    small = [np.array([0.1, 0.2], dtype=np.float32)]
    clip_grad_norm(small, 1.0)
    np.testing.assert_array_equal(small[0], np.array([0.1, 0.2], dtype=np.float32))
    with pytest.raises(ValueError, match="max_norm"):
        clip_grad_norm(grads, 0)


def test_schedules():
    assert [StepLR(3, 0.1)(t) for t in (0, 2, 3, 6)] == pytest.approx([1, 1, 0.1, 0.01])
    cos = CosineLR(10, min_factor=0.1)
    assert cos(0) == pytest.approx(1) and cos(5) == pytest.approx(0.55) and cos(10) == cos(50) == pytest.approx(0.1)
    warm = LinearWarmup(4, CosineLR(4))
    assert [warm(t) for t in range(4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert warm(4) == pytest.approx(1.0) and warm(6) == pytest.approx(0.5) and warm(8) == pytest.approx(0.0)
    opt = SGD(0.2, schedule=LinearWarmup(2))
    assert opt.current_lr() == pytest.approx(0.1)
    with pytest.raises(ValueError):
        StepLR(0)


def test_bad_arguments_name_the_problem():
    with pytest.raises(ValueError, match="lr"):
        SGD(0)
    with pytest.raises(ValueError, match="nesterov"):
        SGD(0.1, nesterov=True)
    with pytest.raises(ValueError, match="contiguous"):
        SGD(0.1).attach({"w": np.ones((4, 4))[:, ::2]})
    w, g = np.ones(3), np.ones(3)
    with pytest.raises(OpAttributeError, match="momentum"):
        run_node("SGDOptimizer", [np.array(0.1), w, g], attrs={"momentum": -1.0}, domain="com.microsoft")
    with pytest.raises(ShapeError, match="shapes differ"):
        run_node("SGDOptimizer", [np.array(0.1), w, np.ones(4)], domain="com.microsoft")
    with pytest.raises(ShapeError, match="groups"):
        run_node("AdamOptimizer", [np.array(0.1), np.array(1), w, g, w.copy()], domain="com.microsoft")
    with pytest.raises(ShapeError, match="step"):
        run_node("AdamOptimizer", [np.array(0.1), np.array(0), w, g, np.zeros(3), np.zeros(3)],
                 domain="com.microsoft")


@pytest.mark.parametrize("make,arg", [
    (lambda: Adam(float("nan")), "lr"), (lambda: SGD("0.1"), "first argument"), (lambda: SGD(lr="0.1"), "lr"),
    (lambda: SGD(lr=-1), "lr"), (lambda: AdamW(lr=math.inf), "lr"), (lambda: SGD(0.1, momentum="0.9"), "momentum"),
    (lambda: SGD(0.1, momentum=-0.5), "momentum"), (lambda: SGD(0.1, momentum=0.9, nesterov="no"), "nesterov"),
    (lambda: SGD(0.1, weight_decay=float("nan")), "weight_decay"), (lambda: Adam(betas=(0.9,)), "betas"),
    (lambda: Adam(betas=(0.9, 1.0)), r"betas\[1\]"), (lambda: Adam(eps=0), "eps"), (lambda: Adam(eps=True), "eps"),
    (lambda: AdamW(weight_decay=-0.1), "weight_decay"), (lambda: SGD(0.1, max_grad_norm=0), "max_grad_norm"),
    (lambda: SGD(0.1, schedule=0.5), "schedule"), (lambda: SGD(0.1, 0.9), "lr=0.9"),
])
def test_hyperparameters_are_checked_at_construction(make, arg):
    with pytest.raises(OptimizerArgumentError, match=arg) as caught:
        make()
    assert str(caught.value).split(":")[0] in ("SGD", "Adam", "AdamW"), "names the optimizer"
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, TypeError)


def _groups_reference(kind, start, stream, groups, **common):
    """Each group's parameters through the single-group reference with the group's settings."""
    reference = reference_adam if kind.startswith("adam") else reference_sgd
    out = {}
    for names, settings in groups:
        out.update(reference({n: start[n] for n in names}, [{n: g[n] for n in names} for g in stream],
                             **{**common, **settings}))
    return out


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw"])
def test_parameter_groups_take_their_own_lr_and_weight_decay(kind, dtype):
    params = _params(dtype)
    start = {n: a.copy() for n, a in params.items()}
    stream = _grad_stream(dtype, 5)
    groups = [{"params": ["w", "k"]}, {"params": [params["b"]], "lr": 0.02, "weight_decay": 0}]
    make = {"sgd": lambda: SGD(groups, lr=0.05, momentum=0.9, weight_decay=0.01),
            "adam": lambda: Adam(groups, lr=0.01, weight_decay=0.05),
            "adamw": lambda: AdamW(groups, lr=0.01, weight_decay=0.1)}[kind]
    opt = make().attach(params)
    assert [g["lr"] for g in opt.param_groups] == [opt.defaults["lr"], 0.02]
    assert opt.attrs()["weight_decays"] == [opt.defaults["weight_decay"], 0.0, opt.defaults["weight_decay"]]
    for grads in stream:
        opt.step(grads)
    common = {"sgd": dict(momentum=0.9), "adam": {}, "adamw": dict(decoupled=True)}[kind]
    expected = _groups_reference(kind, start, stream, [(["w", "k"], dict(lr=opt.defaults["lr"],
                                                        weight_decay=opt.defaults["weight_decay"])),
                                                       (["b"], dict(lr=0.02, weight_decay=0.0))], **common)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    for n in params:
        np.testing.assert_allclose(params[n], expected[n], rtol=tol, atol=tol)


def test_parameter_groups_against_torch_with_a_schedule():
    torch = pytest.importorskip("torch")
    for make, tmake in [
        (lambda g: SGD(g, lr=0.1, momentum=0.9, weight_decay=0.01, schedule=StepLR(2, 0.5)),
         lambda g: torch.optim.SGD(g, lr=0.1, momentum=0.9, weight_decay=0.01)),
        (lambda g: AdamW(g, lr=0.01, weight_decay=0.1, schedule=StepLR(2, 0.5)),
         lambda g: torch.optim.AdamW(g, lr=0.01, weight_decay=0.1)),
    ]:
        params = _params(np.float64)
        tparams = {n: torch.tensor(a.copy(), requires_grad=True) for n, a in params.items()}
        opt = make([{"params": ["w", "k"]}, {"params": ["b"], "lr": 0.3, "weight_decay": 0.0}]).attach(params)
        topt = tmake([{"params": [tparams["w"], tparams["k"]]},
                      {"params": [tparams["b"]], "lr": 0.3, "weight_decay": 0.0}])
        tsched = torch.optim.lr_scheduler.StepLR(topt, 2, 0.5)
        for grads in _grad_stream(np.float64, 6):
            assert opt.current_lrs() == pytest.approx(tsched.get_last_lr())
            for n, t in tparams.items():
                t.grad = torch.tensor(grads[n])
            opt.step(grads)
            topt.step()
            tsched.step()
        for n, t in tparams.items():
            np.testing.assert_allclose(params[n], t.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_a_group_lr_changed_between_updates_is_used():
    params = _params(np.float64)
    start = {n: a.copy() for n, a in params.items()}
    grads = _grad_stream(np.float64, 1)[0]
    opt = SGD([{"params": ["w", "b"]}, {"params": ["k"]}], lr=0.1).attach(params)
    opt.param_groups[1]["lr"] = 0.5
    opt.step(grads)
    np.testing.assert_allclose(params["w"], start["w"] - 0.1 * grads["w"], rtol=1e-12)
    np.testing.assert_allclose(params["k"], start["k"] - 0.5 * grads["k"], rtol=1e-12)


def test_bad_parameter_groups_name_the_problem():
    params = _params(np.float64)
    with pytest.raises(OptimizerArgumentError, match="not a parameter of the model"):
        SGD([{"params": ["w", "nope"]}], lr=0.1).attach(params)
    with pytest.raises(OptimizerArgumentError, match="'w' is in parameter groups 0 and 1"):
        SGD([{"params": ["w"]}, {"params": [params["w"]]}], lr=0.1).attach(params)
    with pytest.raises(OptimizerArgumentError, match=r"\['k'\] are in no parameter group"):
        SGD([{"params": ["w", "b"]}], lr=0.1).attach(params)
    with pytest.raises(OptimizerArgumentError, match="group 1 sets \\['momentum'\\]"):
        SGD([{"params": ["w"]}, {"params": ["b"], "momentum": 0.5}], lr=0.1)
    with pytest.raises(OptimizerArgumentError, match="group 0 has no 'params'"):
        SGD([{"lr": 0.1}])
    with pytest.raises(OptimizerArgumentError, match="empty"):
        Adam([])
    with pytest.raises(OptimizerArgumentError, match="group 1's lr"):
        SGD([{"params": ["w"]}, {"params": ["b"], "lr": -1.0}], lr=0.1)
    with pytest.raises(OptimizerArgumentError, match="Parameters, parameter names or arrays"):
        SGD([nn.Buffer(np.zeros(3))], lr=0.1)


def test_optimizer_kernels_take_a_rate_per_parameter():
    w, b = np.ones(3), np.ones(2)
    gw, gb = np.full(3, 2.0), np.full(2, 4.0)
    run_node("SGDOptimizer", [np.array([0.5, 0.25]), w, b, gw, gb], attrs={"weight_decays": [1.0, 0.0]},
             domain="com.microsoft")
    np.testing.assert_allclose(w, 1 - 0.5 * (2.0 + 1.0))
    np.testing.assert_allclose(b, 1 - 0.25 * 4.0)
    with pytest.raises(ShapeError, match="one rate per parameter"):
        run_node("SGDOptimizer", [np.array([0.5, 0.25, 0.1]), w, b, gw, gb], domain="com.microsoft")
    with pytest.raises(OpAttributeError, match="weight_decays"):
        run_node("SGDOptimizer", [np.array(0.5), w, b, gw, gb], attrs={"weight_decays": [1.0]},
                 domain="com.microsoft")


def _sgd_many(dtype, momentum, nesterov, max_norm):
    """Tensors below and above the parallel threshold (the large ones split in 8192-element
    chunks), updated by one SGDOptimizer node: (inputs before, norm, tensors after)."""
    rng = np.random.default_rng(0)
    shapes = [(5,), (300, 700), (3, 3), (20000,)]
    groups = 3 if momentum else 2
    tensors = [rng.standard_normal(s).astype(dtype) for _ in range(groups) for s in shapes]
    start = [t.copy() for t in tensors]
    (norm,) = run_node("SGDOptimizer", [np.array(0.1, dtype), *tensors], domain="com.microsoft",
                       attrs={"momentum": momentum, "nesterov": nesterov, "weight_decay": 0.01, "max_norm": max_norm})
    return start, norm, tensors


@pytest.mark.parametrize("momentum,nesterov,max_norm", [(0.0, 0, 0.0), (0.9, 0, 0.0), (0.9, 1, 0.0), (0.9, 0, 50.0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sgd_kernel_updates_every_tensor_in_one_call(momentum, nesterov, max_norm, dtype, threads):
    """The norm comes from the update's own pass (no clipping) or a pass before it (clipping)."""
    start, norm, after = _sgd_many(dtype, momentum, nesterov, max_norm)
    count = 4
    grads = [g.astype(np.float64) for g in start[count:2 * count]]
    expected_norm = math.sqrt(sum(float(np.sum(g ** 2)) for g in grads))
    assert norm.dtype == dtype
    np.testing.assert_allclose(norm, expected_norm, rtol=1e-12 if dtype == np.float64 else 1e-6)
    scale = min(1.0, max_norm / (expected_norm + 1e-6)) if max_norm else 1.0
    tol = 1e-12 if dtype == np.float64 else 2e-5
    for k in range(count):
        w = start[k].astype(np.float64)
        d = grads[k] * scale + 0.01 * w
        if momentum:
            buf = momentum * start[2 * count + k] + d
            np.testing.assert_allclose(after[2 * count + k], buf, rtol=tol, atol=tol)
            d = d + momentum * buf if nesterov else buf
        np.testing.assert_allclose(after[k], w - 0.1 * d, rtol=tol, atol=tol)


@pytest.mark.parametrize("momentum,max_norm", [(0.0, 0.0), (0.9, 50.0)])
def test_sgd_kernel_gives_the_same_bits_at_every_thread_count(momentum, max_norm):
    import minitrain
    old = minitrain.get_num_threads()
    runs = []
    try:
        for count in (1, 2):
            minitrain.set_num_threads(count)
            runs.append(_sgd_many(np.float32, momentum, 0, max_norm)[1:])
    finally:
        minitrain.set_num_threads(old)
    (norm1, after1), (norm2, after2) = runs
    assert norm1.tobytes() == norm2.tobytes()
    for one, two in zip(after1, after2):
        np.testing.assert_array_equal(one, two)
