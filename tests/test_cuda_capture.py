"""Whole-step CUDA Graphs: captured and uncaptured training give bitwise-equal parameters, a new
batch size captures a second graph, device-fed inputs are read where they lie and a small host
input is staged again after a device feed, a checkpoint of a captured run resumes bitwise, the step's
arena never gives two live allocations the same bytes, Dropout draws a new mask per replay, a
learning rate changed between replays reaches the graph, and a plan with a host node runs
uncaptured."""
import logging

import numpy as np
import pytest

import minitrain
from minitrain import nn
from minitrain.memory_plan import check_disjoint
from minitrain.optim import SGD, Adam
from minitrain.providers import get_provider
from minitrain.training import TrainingSession

pytestmark = pytest.mark.cuda


@pytest.fixture(autouse=True)
def deterministic_convolutions(search):
    """Sessions start from the default provider's search options (the fixture restores them)."""
    options = get_provider("cuda").conv_search
    options.deterministic = True
    options.mode = "heuristic"


def lenet(dropout=0.0, seed=0):
    minitrain.random.seed(seed)
    layers = [nn.Conv2d(1, 6, 5, padding=2), nn.BatchNorm2d(6), nn.Relu(), nn.MaxPool2d(2),
              nn.Conv2d(6, 16, 5), nn.Relu(), nn.MaxPool2d(2), nn.Flatten(),
              nn.Linear(16 * 5 * 5, 120), nn.Relu()]
    layers += [nn.Dropout(dropout)] if dropout else []
    return nn.Sequential(*layers, nn.Linear(120, 84), nn.Relu(), nn.Linear(84, 10))


def batches(n, steps, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((n, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, n)) for _ in range(steps)]


def session(capture, optimizer=None, dropout=0.0):
    return TrainingSession(lenet(dropout), nn.CrossEntropyLoss(), optimizer or SGD(0.05, momentum=0.9),
                           input_shape=(1, 28, 28), device="cuda", capture=capture)


def params_after(s, data):
    losses = [float(s.train_step(x, y)) for x, y in data]
    s.pull()
    return losses, {name: p.copy() for name, p in s.params.items()}


@pytest.mark.parametrize("optimizer", [lambda: SGD(0.05, momentum=0.9), lambda: Adam(1e-3, max_grad_norm=1.0)],
                         ids=["sgd", "adam"])
def test_captured_and_uncaptured_steps_give_bitwise_equal_parameters(optimizer):
    data = batches(64, 20)
    plain_losses, plain = params_after(session(False, optimizer()), data)
    captured = session(True, optimizer())
    losses, params = params_after(captured, data)
    assert captured._train.graphs.stats["captures"] == 1
    assert captured._train.graphs.stats["replays"] == 17
    assert losses == plain_losses
    for name in plain:
        assert np.array_equal(params[name], plain[name]), name


def test_a_new_batch_size_captures_a_second_graph_and_stays_correct():
    data = batches(64, 6) + batches(32, 6, seed=1) + batches(64, 3, seed=2)
    _, plain = params_after(session(False), data)
    captured = session(True)
    _, params = params_after(captured, data)
    assert captured._train.graphs.stats["captures"] == 2
    assert len(captured._train.graphs.memory()) == 2
    for name in plain:
        assert np.array_equal(params[name], plain[name]), name


def test_device_and_host_feeds_mix_in_a_captured_run():
    """Batches fed as device tensors skip the staging; mixed with host batches the run equals
    the uncaptured host-fed one."""
    data = batches(64, 8)
    _, plain = params_after(session(False), data)
    captured = session(True)
    provider = captured._provider
    mixed = [(provider.from_numpy(x) if i % 3 else x, provider.from_numpy(y) if i % 2 else y)
             for i, (x, y) in enumerate(data)]
    _, params = params_after(captured, mixed)
    assert captured._train.graphs.stats["replays"] == 5
    for name in plain:
        assert np.array_equal(params[name], plain[name]), name


def test_device_batches_refilled_in_place_reach_the_graph():
    """The graph reads a device-fed input where it lies: the same tensors, refilled between
    steps, give the host-fed run."""
    data = batches(64, 8)
    _, plain = params_after(session(False), data)
    captured = session(True)
    provider = captured._provider
    x_device, y_device = provider.from_numpy(data[0][0]), provider.from_numpy(data[0][1])
    for x, y in data:
        provider.copy_into(x_device, x)
        provider.copy_into(y_device, y)
        captured.train_step(x_device, y_device)
    captured.pull()
    params = {name: p.copy() for name, p in captured.params.items()}
    assert captured._train.graphs.stats["replays"] == 5
    for name in plain:
        assert np.array_equal(params[name], plain[name]), name


def test_a_small_input_fed_from_host_after_a_device_feed_is_staged_again():
    """Targets of a batch of 8 are small host values, the only host values of a replay fed
    device images: one equal to the last staged, after a step that fed them from the device, is
    staged again, not left to the device tensor's."""
    data = batches(8, 9)
    data[7] = (data[7][0], data[5][1])
    _, plain = params_after(session(False), data)
    captured = session(True)
    provider = captured._provider
    mixed = [(provider.from_numpy(x), provider.from_numpy(y) if i == 6 else y) for i, (x, y) in enumerate(data)]
    _, params = params_after(captured, mixed)
    assert captured._train.graphs.stats["replays"] == 6
    for name in plain:
        assert np.array_equal(params[name], plain[name]), name


def test_a_learning_rate_changed_between_replays_reaches_the_graph():
    """Device-fed batches leave the learning rate the only host value of a replay: it is staged
    again when it changes, and held in the graph's input while it does not."""
    data = batches(64, 16)

    def run(s):
        provider = s._provider
        for step, (x, y) in enumerate(data):
            if step in (7, 12):
                s.optimizer.param_groups[0]["lr"] *= 0.5
            s.train_step(provider.from_numpy(x), provider.from_numpy(y))
        s.pull()
        return {name: p.copy() for name, p in s.params.items()}
    plain = run(session(False))
    captured = session(True)
    params = run(captured)
    assert captured._train.graphs.stats["replays"] == 13
    for name in plain:
        assert np.array_equal(params[name], plain[name]), name


def test_a_checkpoint_of_a_captured_run_resumes_bitwise(tmp_path):
    data = batches(64, 20)
    first = session(True)
    params_after(first, data[:10])
    first.save(tmp_path / "mid.mtc")
    _, straight = params_after(first, data[10:])
    resumed = session(True)
    resumed.load(tmp_path / "mid.mtc")
    _, again = params_after(resumed, data[10:])
    assert resumed._train.graphs.stats["replays"] > 0
    for name in straight:
        assert np.array_equal(again[name], straight[name]), name


def test_the_step_arena_never_overlaps_live_allocations():
    s = session(True)
    params_after(s, batches(64, 3))
    (key, sig), = s._train.graphs.signatures.items()
    check_disjoint(sig.memory_plan)
    arena, total = s._train.graphs.memory()[key]
    assert 0 < arena <= total


def test_dropout_draws_a_new_mask_on_every_replay_and_follows_the_seed():
    x, y = batches(64, 1)[0]
    s = session(True, SGD(1e-9), dropout=0.5)
    losses = [float(s.train_step(x, y)) for _ in range(6)]
    assert s._train.graphs.stats["replays"] == 3
    assert len(set(losses[3:])) == 3, losses
    again = session(True, SGD(1e-9), dropout=0.5)
    minitrain.random.seed(7)
    first = [float(again.train_step(x, y)) for _ in range(6)]
    minitrain.random.seed(7)
    second = [float(again.train_step(x, y)) for _ in range(6)]
    assert first[3:] == second[3:]


def test_a_plan_with_a_host_node_runs_uncaptured_and_says_why(caplog):
    with caplog.at_level(logging.INFO, logger="minitrain.capture"):
        s = TrainingSession(lenet(), nn.CrossEntropyLoss(), SGD(0.05), input_shape=(1, 28, 28),
                            device=["cuda", "cpu"], capture=True)
        s._train.plan.steps[0].provider = "cpu"
        from minitrain.providers.cuda.capture.step_graph import capture_blocker
        assert "cpu" in capture_blocker(s._train.plan, s._provider)


def test_train_step_without_waiting_returns_a_pending_loss():
    s = session(True)
    pending = [s.train_step(x, y, wait=False) for x, y in batches(64, 5)]
    values = [float(p) for p in pending]
    assert all(np.isfinite(values)) and s.last_output.shape == (64, 10)
    assert s.last_grad_norm > 0
