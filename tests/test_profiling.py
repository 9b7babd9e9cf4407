"""Per-node profiling: a profiled training step gives every node a time and writes a Chrome
trace (Trace Event Format) that lays the nodes out in order; fit and the CLI write it for the
third step and report steps per second."""
import json

import numpy as np

import minitrain
from minitrain import nn
from minitrain.cli import main
from minitrain.data import ArrayDataset, DataLoader
from minitrain.optim import SGD
from minitrain.training import TrainingSession, fit


def small_session():
    minitrain.random.seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Relu(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 3))
    return TrainingSession(model, nn.CrossEntropyLoss(), SGD(0.1), input_shape=(1, 8, 8))


def data(n=32):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 1, 8, 8)).astype(np.float32), rng.integers(0, 3, n)


def test_a_profiled_step_times_every_node_and_writes_a_chrome_trace(tmp_path):
    s = small_session()
    x, y = data()
    loss = float(s.profile_step(x, y, tmp_path / "trace.json"))
    trace = json.loads((tmp_path / "trace.json").read_text())
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [e["name"] for e in slices] == [step.node.name for step in s.train_plan.steps]
    assert all(e["dur"] >= 0 for e in slices)
    assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-3 for a, b in zip(slices, slices[1:]))
    assert set(s._profiled.profile) == {step.node.name for step in s.train_plan.steps}
    assert np.isfinite(loss) and s.step_count == 1


def test_fit_profiles_the_first_step_and_reports_steps_per_second(tmp_path):
    x, y = data()
    history = fit(small_session(), DataLoader(ArrayDataset(x, y), 8), epochs=1, progress=False,
                  log=lambda *_: None, profile=str(tmp_path / "fit.json"))
    assert (tmp_path / "fit.json").exists() and history[0]["steps_per_s"] > 0


def test_the_cli_writes_a_trace_with_profile(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MINITRAIN_PROFILE", raising=False)
    main(["train", "lenet_digits", "--epochs", "1", "--max-steps", "3", "--no-progress",
          "--profile", str(tmp_path / "cli.json")])
    assert json.loads((tmp_path / "cli.json").read_text())["traceEvents"]
    assert "steps_per_s" in capsys.readouterr().out
