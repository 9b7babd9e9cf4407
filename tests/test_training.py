"""TrainingSession: the compiled update, plan reuse across batch sizes, gradient accumulation
and zero_grad semantics, BatchNorm statistics, Dropout, evaluation."""
import numpy as np
import pytest

import minitrain
from minitrain import nn
from minitrain import run_node
from minitrain.errors import GraphError, ProviderUnavailableError
from minitrain.optim import SGD, Adam, StepLR
from minitrain.training import TrainingSession


def mlp(seed=0, dtype=np.float64, dropout=0.0, batchnorm=False):
    minitrain.random.seed(seed)
    layers = [nn.Linear(6, 16)] + ([nn.BatchNorm1d(16)] if batchnorm else []) + [nn.Relu()]
    layers += ([nn.Dropout(dropout)] if dropout else []) + [nn.Linear(16, 3)]
    return nn.Sequential(*layers).to_dtype(dtype)


def data(n=24, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 6)).astype(dtype)
    return x, (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)


def arrays(model):
    """The model's parameter arrays by name."""
    return {n: p.data for n, p in model.named_parameters()}


def session(model, optimizer=None, **kw):
    return TrainingSession(model, nn.CrossEntropyLoss(), optimizer or SGD(0.1, momentum=0.9), input_shape=(6,), **kw)


def test_train_step_learns_and_matches_accumulate_then_step():
    x, y = data()
    a, b = session(mlp()), session(mlp())
    losses = [a.train_step(x, y) for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0]
    b_model_losses = []
    for _ in range(30):
        b.zero_grad()
        b_model_losses.append(b.accumulate(x, y))
        b.step()
    np.testing.assert_array_equal(losses, b_model_losses)
    for name, p in arrays(a.model).items():
        np.testing.assert_array_equal(p, arrays(b.model)[name])
    assert a.step_count == b.step_count == 30


def test_new_batch_sizes_reuse_the_plan():
    x, y = data(20)
    s = session(mlp())
    plan = s.train_plan
    for n in (8, 5, 8, 20):
        loss = s.train_step(x[:n], y[:n])
        assert np.isfinite(loss) and s.last_output.shape == (n, 3)
    assert s.train_plan is plan and s._train.plan is plan
    assert s.eval_step(x[:3]).shape == (3, 3) and s.eval_step(x).shape == (20, 3)


def test_micro_batches_give_the_same_update():
    x, y = data(24)
    whole, split = session(mlp(), Adam(0.01)), session(mlp(), Adam(0.01))
    for _ in range(3):
        a = whole.train_step(x, y)
        b = split.train_step(x, y, micro_batches=4)
        assert b == pytest.approx(a, rel=1e-12)
    for name, p in arrays(whole.model).items():
        np.testing.assert_allclose(arrays(split.model)[name], p, rtol=1e-10, atol=1e-12)
    assert all(not g.any() for g in split.grads.values()), "train_step leaves gradients zero"
    with pytest.raises(ValueError, match="micro_batches"):
        split.train_step(x[:2], y[:2], micro_batches=3)


def test_zero_grad_semantics():
    x, y = data(12)
    s = session(mlp())
    s.accumulate(x, y)
    once = {k: g.copy() for k, g in s.grads.items()}
    s.accumulate(x, y)
    for k, g in s.grads.items():
        np.testing.assert_allclose(g, 2 * once[k], rtol=1e-12), "accumulate adds"
    before = {k: p.copy() for k, p in arrays(s.model).items()}
    s.step()
    assert any(not np.array_equal(p, before[k]) for k, p in arrays(s.model).items())
    for k, g in s.grads.items():
        np.testing.assert_allclose(g, 2 * once[k], rtol=1e-12), "step() keeps the gradients"
    s.zero_grad()
    assert all(not g.any() for g in s.grads.values())
    s.accumulate(x, y)
    now = {k: g.copy() for k, g in s.grads.items()}
    s.zero_grad()
    s.accumulate(x, y, scale=0.5)
    for k, g in s.grads.items():
        np.testing.assert_allclose(g, 0.5 * now[k], rtol=1e-12)
    s.train_step(x, y)
    assert all(not g.any() for g in s.grads.values()), "train_step discards accumulated gradients"
    with pytest.raises(RuntimeError, match="accumulate"):
        session(mlp()).step()


def test_batchnorm_running_statistics_follow_training():
    x, y = data(32)
    s = session(mlp(batchnorm=True))
    bn = s.model[1]
    s.train_step(x, y)
    mean_before = bn.running_mean.data.copy()
    w, b = s.model[0].weight.data.copy(), s.model[0].bias.data.copy()
    s.train_step(x, y)
    h = x @ w.T + b
    np.testing.assert_allclose(bn.running_mean.data, 0.9 * mean_before + 0.1 * h.mean(0), rtol=1e-10)
    # inference uses the running statistics: a single sample gives the same output alone or in a batch
    np.testing.assert_allclose(s.eval_step(x[:1]), s.eval_step(x)[:1], rtol=1e-12)


def test_dropout_is_random_in_training_and_off_in_evaluation():
    x, y = data(16)
    s, again = session(mlp(dropout=0.5), SGD(1e-9)), session(mlp(dropout=0.5), SGD(1e-9))
    minitrain.random.seed(0)
    first = s.train_step(x, y)
    second = s.train_step(x, y)
    assert first != second
    minitrain.random.seed(0)
    assert again.train_step(x, y) == first, "seeded masks repeat"
    np.testing.assert_array_equal(s.eval_step(x), s.eval_step(x))
    loss, out = s.evaluate(x, y)
    np.testing.assert_array_equal(out, s.eval_step(x))
    logp = out - np.log(np.exp(out).sum(1, keepdims=True))
    assert loss == pytest.approx(-logp[np.arange(16), y].mean(), rel=1e-12)


def test_mse_session_infers_target_shape():
    minitrain.random.seed(0)
    model = nn.Sequential(nn.Conv1d(1, 4, 3, padding=1), nn.Tanh(), nn.Conv1d(4, 1, 3, padding=1)).to_dtype(np.float64)
    s = TrainingSession(model, nn.MSELoss(), Adam(0.01), input_shape=(1, 10))
    x = np.random.default_rng(0).standard_normal((8, 1, 10))
    losses = [s.train_step(x, x) for _ in range(40)]
    assert losses[-1] < 0.3 * losses[0]


def test_float32_sessions_and_ignore_index():
    x, y = data(16, dtype=np.float32)
    y = y.copy()
    y[:4] = -100
    s = TrainingSession(mlp(dtype=np.float32), nn.CrossEntropyLoss(ignore_index=-100), SGD(0.1), input_shape=(6,))
    loss = s.train_step(x, y)
    assert isinstance(loss, float) and np.isfinite(loss)
    assert arrays(s.model)["0.weight"].dtype == np.float32


class WithAuxHead(nn.Module):
    """An auxiliary head: never called (`computed` False), or computed and dropped."""

    def __init__(self, computed):
        super().__init__()
        self.computed = computed
        self.body, self.aux = nn.Linear(6, 3), nn.Linear(6, 3)

    def forward(self, x):
        if self.computed:
            self.aux(x)
        return self.body(x)


@pytest.mark.parametrize("computed", [False, True], ids=["never_called", "output_dropped"])
def test_an_unused_layer_gets_no_gradient_no_update_and_one_log_line(computed, caplog):
    minitrain.random.seed(0)
    model = WithAuxHead(computed).to_dtype(np.float64)
    aux_before = {k: v.copy() for k, v in arrays(model).items() if k.startswith("aux.")}
    with caplog.at_level("WARNING", logger="minitrain.training.session"):
        s = session(model)
        x, y = data()
        for _ in range(3):
            s.train_step(x, y)
        s.accumulate(x, y)
        s.step()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "'aux.weight', 'aux.bias'" in lines[0] and "no update" in lines[0]
    assert sorted(s.trained) == ["body.bias", "body.weight"] and sorted(s.grads) == ["body.bias", "body.weight"]
    for k, v in aux_before.items():
        np.testing.assert_array_equal(arrays(model)[k], v)
    assert not np.array_equal(arrays(model)["body.weight"], WithAuxHead(computed).body.weight.data)


def frozen_mlp():
    model = mlp()
    model[0].requires_grad_(False)
    return model


def test_frozen_parameters_get_no_gradient_nodes_and_no_update():
    model = frozen_mlp()
    frozen = {k: v.copy() for k, v in arrays(model).items() if k.startswith("0.")}
    s = session(model, SGD(0.1, momentum=0.9, weight_decay=0.1))
    assert sorted(s.trained) == ["2.bias", "2.weight"]
    produced = {o for n in s.grad_graph.nodes for o in n.outputs}
    assert not [o for o in produced if o.startswith(("0.weight_grad", "0.bias_grad"))], "no gradient nodes"
    assert [o for o in produced if o.startswith("2.weight_grad")]
    assert set(s.optimizer.state["momentum"]) == {"2.bias", "2.weight"}
    x, y = data()
    before = arrays(model)["2.weight"].copy()
    for _ in range(3):
        s.train_step(x, y)
    for k, v in frozen.items():
        np.testing.assert_array_equal(arrays(model)[k], v)
    assert not np.array_equal(arrays(model)["2.weight"], before)


def test_frozen_training_matches_torch():
    torch = pytest.importorskip("torch")
    model = frozen_mlp()
    tmodel = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).double()
    with torch.no_grad():
        for (_, ours), theirs in zip(model.named_parameters(), tmodel.parameters()):
            theirs.copy_(torch.tensor(ours.data))
    tmodel[0].requires_grad_(False)
    s = session(model, SGD(0.1, momentum=0.9, weight_decay=0.01))
    topt = torch.optim.SGD([p for p in tmodel.parameters() if p.requires_grad], 0.1, 0.9, weight_decay=0.01)
    x, y = data()
    for _ in range(3):
        loss = s.train_step(x, y)
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(tmodel(torch.tensor(x)), torch.tensor(y))
        tloss.backward()
        topt.step()
        assert loss == pytest.approx(tloss.item(), rel=1e-12)
    for (name, ours), theirs in zip(model.named_parameters(), tmodel.parameters()):
        np.testing.assert_allclose(ours.data, theirs.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=name)


def test_requires_grad_changed_after_building_is_an_error():
    model = mlp()
    s = session(model)
    model[2].weight.requires_grad = False
    x, y = data()
    with pytest.raises(ValueError, match=r"requires_grad of \['2.weight'\] changed after the session was built"):
        s.train_step(x, y)
    with pytest.raises(ValueError, match="requires_grad"):
        s.accumulate(x, y)
    model.requires_grad_(False)
    with pytest.raises(ValueError, match="no parameter to train"):
        session(model)


def test_parameter_groups_in_a_session_match_torch_with_a_schedule():
    """No weight decay on biases, a larger lr on the last layer, a StepLR schedule over both."""
    torch = pytest.importorskip("torch")
    model = mlp()
    params = dict(model.named_parameters())
    groups = [{"params": [params["0.weight"]]}, {"params": ["0.bias", "2.bias"], "weight_decay": 0.0},
              {"params": [params["2.weight"]], "lr": 0.3}]
    s = session(model, SGD(groups, lr=0.1, momentum=0.9, weight_decay=0.05, schedule=StepLR(2, 0.5)))
    tmodel = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).double()
    with torch.no_grad():
        for (_, ours), theirs in zip(model.named_parameters(), tmodel.parameters()):
            theirs.copy_(torch.tensor(ours.data))
    t = dict(tmodel.named_parameters())
    topt = torch.optim.SGD([{"params": [t["0.weight"]]}, {"params": [t["0.bias"], t["2.bias"]], "weight_decay": 0.0},
                            {"params": [t["2.weight"]], "lr": 0.3}], lr=0.1, momentum=0.9, weight_decay=0.05)
    tsched = torch.optim.lr_scheduler.StepLR(topt, 2, 0.5)
    x, y = data()
    for _ in range(5):
        s.train_step(x, y)
        topt.zero_grad()
        torch.nn.functional.cross_entropy(tmodel(torch.tensor(x)), torch.tensor(y)).backward()
        topt.step()
        tsched.step()
    for (name, ours), theirs in zip(model.named_parameters(), tmodel.parameters()):
        np.testing.assert_allclose(ours.data, theirs.detach().numpy(), rtol=1e-10, atol=1e-12, err_msg=name)


def test_parameters_outside_the_optimizer_groups_are_not_trained():
    model = mlp()
    before = arrays(model)["0.weight"].copy()
    s = session(model, Adam([model[2].weight, model[2].bias], lr=0.01))
    assert sorted(s.trained) == ["2.bias", "2.weight"]
    s.train_step(*data())
    np.testing.assert_array_equal(arrays(model)["0.weight"], before)


def test_cuda_without_pycuda_is_a_clear_error():
    """Where pycuda is missing, asking for the GPU names what is missing, not an ImportError."""
    try:
        import pycuda  # noqa: F401
        pytest.skip("pycuda is installed here")
    except ImportError:
        pass
    with pytest.raises(ProviderUnavailableError, match="pycuda"):
        session(mlp(), device="cuda")
    with pytest.raises(RuntimeError, match="pycuda"):
        run_node("Relu", [np.ones(3, np.float32)], provider="cuda")


def test_targets_are_cast_and_losses_must_be_scalar():
    x, y = data(8)
    s = session(mlp())
    assert np.isfinite(s.train_step(x, y.astype(np.int32)))
    assert session(mlp()).train_step(x, y.astype(np.float64)) == session(mlp()).train_step(x, y)   # whole: fine
    for bad in (0.5, np.nan):
        labels = y.astype(np.float64)
        labels[3] = bad
        with pytest.raises(TypeError, match=f"class labels .* hold {bad}"):
            s.train_step(x, labels)
    with pytest.raises(ValueError, match="scalar loss"):
        TrainingSession(mlp(), nn.CrossEntropyLoss("none"), SGD(0.1), input_shape=(6,))


def test_compiled_update_follows_the_schedule_and_clips():
    x, y = data(16)
    s = session(mlp(), SGD(0.5, schedule=StepLR(1, gamma=0.0)))     # factor 1, then 0
    before = {k: p.copy() for k, p in arrays(s.model).items()}
    s.train_step(x, y)
    after_first = {k: p.copy() for k, p in arrays(s.model).items()}
    assert any(not np.array_equal(after_first[k], before[k]) for k in before)
    s.train_step(x, y)                       # the schedule's factor is now 0
    for k, p in arrays(s.model).items():
        np.testing.assert_array_equal(p, after_first[k])
    clipped = session(mlp(), SGD(1.0, max_grad_norm=1e-3))
    start = {k: p.copy() for k, p in arrays(clipped.model).items()}
    clipped.train_step(x, y)
    moved = np.sqrt(sum(np.sum((p - start[k]) ** 2) for k, p in arrays(clipped.model).items()))
    assert moved == pytest.approx(1e-3, rel=1e-3) and clipped.last_grad_norm > 1e-3
