"""Training on the GPU: a LeNet run on CUDA tracks the CPU run step by step (float64, no
Dropout, same seed), no node of the examples falls back to the CPU, gradient accumulation
and checkpoints work across devices, and every example trains to its bar with --device cuda."""
import os
import sys

import numpy as np
import pytest

import minitrain
from minitrain import nn
from minitrain.cli import load_example
from minitrain.optim import SGD, AdamW
from minitrain.training import TrainingSession

pytestmark = pytest.mark.cuda


def lenet(seed=0):
    minitrain.random.seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 6, 3, padding=1), nn.BatchNorm2d(6), nn.Relu(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 3, padding=1), nn.Relu(), nn.AvgPool2d(2), nn.Flatten(),
        nn.Linear(16 * 2 * 2, 32), nn.Relu(), nn.Linear(32, 10)).to_dtype(np.float64)


def digits(n=64, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 1, 8, 8)), rng.integers(0, 10, n)


def session(device, optimizer=None, seed=0):
    return TrainingSession(lenet(seed), nn.CrossEntropyLoss(), optimizer or AdamW(1e-2, max_grad_norm=1.0),
                           input_shape=(1, 8, 8), device=device)


def test_fifty_lenet_steps_on_cuda_track_the_cpu_run():
    x, y = digits()
    cpu, gpu = session("cpu"), session("cuda")
    for step in range(50):
        batch = slice((step * 16) % 64, (step * 16) % 64 + 16)
        lc, lg = cpu.train_step(x[batch], y[batch]), gpu.train_step(x[batch], y[batch])
        assert abs(lc - lg) <= 1e-8 * max(1.0, abs(lc)), f"step {step}: cpu loss {lc}, cuda loss {lg}"
    gpu.pull()
    for name, p in cpu.params.items():
        np.testing.assert_allclose(gpu.params[name], p, rtol=1e-7, atol=1e-9, err_msg=name)


def example_sessions():
    """A CUDA session of each example's model, with the input shape and loss its run() uses."""
    volumes = load_example("conv3d_volumes")
    shapes = {"lenet_digits": ((1, 8, 8), nn.CrossEntropyLoss()), "cnn1d_mnist1d": ((1, 40), nn.CrossEntropyLoss()),
              "conv3d_volumes": ((1,) + (volumes.SIZE,) * 3, nn.CrossEntropyLoss()),
              "convtranspose_autoencoder": ((1, 8, 8), nn.MSELoss())}
    for name, (shape, loss) in shapes.items():
        model = load_example(name).build_model()
        yield name, TrainingSession(model, loss, AdamW(1e-3), input_shape=shape, device="cuda")


def test_no_node_of_the_examples_falls_back_to_the_cpu():
    for name, s in example_sessions():
        fallen = [(n, op) for n, op, provider in s.train_plan.placement() if provider != "cuda"]
        assert not fallen, f"{name}: nodes off the GPU: {fallen}\n{s.plan_description()}"


def test_accumulate_then_step_equals_one_step_on_cuda():
    """Micro-batches change BatchNorm's statistics, so the whole batch is accumulated once."""
    x, y = digits(32)
    a, b = session("cuda", SGD(0.05, momentum=0.9)), session("cuda", SGD(0.05, momentum=0.9))
    la = a.train_step(x, y)
    b.zero_grad()
    lb = b.accumulate(x, y)
    b.step()
    assert abs(la - lb) < 1e-12
    a.pull(), b.pull()
    for name in a.params:
        np.testing.assert_allclose(a.params[name], b.params[name], rtol=1e-9, atol=1e-12, err_msg=name)


def test_checkpoints_move_between_devices_and_resume_bitwise(tmp_path):
    x, y = digits(32)
    gpu = session("cuda")
    for _ in range(3):
        gpu.train_step(x, y)
    gpu.save(tmp_path / "gpu.mtc")
    cpu = session("cpu", seed=1)
    cpu.load(tmp_path / "gpu.mtc")
    for name, p in gpu.params.items():
        np.testing.assert_array_equal(cpu.params[name], p)
    resumed = session("cuda", seed=2)
    resumed.load(tmp_path / "gpu.mtc")
    assert resumed.train_step(x, y) == gpu.train_step(x, y), "resume on the same device is bitwise"
    cpu.save(tmp_path / "cpu.mtc")
    back = session("cuda", seed=3)
    back.load(tmp_path / "cpu.mtc")
    assert abs(back.train_step(x, y) - cpu.train_step(x, y)) < 1e-8


# each example's bar, from its docstring: accuracy at least, or test MSE at most
BARS = {"lenet_digits": 0.97, "cnn1d_mnist1d": 0.94, "conv3d_volumes": 0.95, "convtranspose_autoencoder": 0.015}


@pytest.mark.parametrize("name", sorted(BARS))
def test_example_reaches_its_bar_on_cuda(name):
    result = load_example(name).run(device="cuda", progress=False)
    bar = BARS[name]
    assert (result <= bar) if name == "convtranspose_autoencoder" else (result >= bar), f"{name}: {result}, bar {bar}"


def test_graph_api_example_trains_on_cuda():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
    import mlp_digits
    assert mlp_digits.main(["--device", "cuda", "--epochs", "10"]) >= 0.9


@pytest.mark.parametrize("name", ["label_smoothing", "focal", "distillation", "bce"])
def test_user_written_losses_train_on_cuda_as_on_the_cpu(name):
    """A loss written with Tensor maths runs its nodes that have no CUDA kernel on the CPU (with
    copies between the devices) and trains as the CPU session does."""
    sys.path.insert(0, os.path.dirname(__file__))
    from test_custom_losses import LOSSES, _targets
    loss, kind = LOSSES[name]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 8, 20))
    targets = [_targets(kind, rng, n=8, c=4) for _ in range(5)]
    extra = {"target_dtype": "int64", "target_shape": ()} if kind == "labels" else {}
    sessions = []
    for device in ("cpu", "cuda"):
        minitrain.random.seed(0)
        model = nn.Sequential(nn.Linear(20, 16), nn.Relu(), nn.Linear(16, 4)).to_dtype(np.float64)
        sessions.append(TrainingSession(model, loss, SGD(0.1), input_shape=(20,), device=device, **extra))
    for step in range(5):
        lc, lg = (s.train_step(x[step], targets[step]) for s in sessions)
        assert abs(lc - lg) <= 1e-9 * max(1.0, abs(lc)), f"step {step}: cpu loss {lc}, cuda loss {lg}"
    sessions[1].pull()
    for param, value in sessions[0].params.items():
        np.testing.assert_allclose(sessions[1].params[param], value, rtol=1e-8, atol=1e-10, err_msg=param)
