"""fit(): per-epoch metrics log, checkpoint each epoch, resume, plot, progress bar."""
import json

import numpy as np
import pytest

import minitrain
from minitrain import nn, optim
from minitrain.data import ArrayDataset, DataLoader
from minitrain.training import TrainingSession, fit, plot_metrics


def setup(seed=0):
    minitrain.random.seed(seed)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    model = nn.Sequential(nn.Linear(4, 8), nn.Relu(), nn.Dropout(0.1), nn.Linear(8, 2))
    session = TrainingSession(model, nn.CrossEntropyLoss(), optim.SGD(0.1, momentum=0.9), input_shape=(4,))
    return session, DataLoader(ArrayDataset(x, y), 8, shuffle=True, seed=1), (x, y)


def test_fit_logs_checkpoints_and_resumes_exactly(tmp_path):
    session, loader, test = setup()
    full = fit(session, loader, epochs=4, test=test, out_dir=str(tmp_path / "full"), progress=False, log=lambda s: None)
    assert [r["epoch"] for r in full] == [1, 2, 3, 4] and full[-1]["step"] == 20
    lines = (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(l) for l in lines] == full
    assert set(full[0]) >= {"train_loss", "train_accuracy", "test_loss", "test_accuracy", "lr", "seconds"}

    session, loader, test = setup()
    fit(session, loader, epochs=2, test=test, out_dir=str(tmp_path / "part"), progress=False, log=lambda s: None)
    session, loader, test = setup(seed=5)        # a fresh process would start like this
    messages = []
    resumed = fit(session, loader, epochs=4, test=test, out_dir=str(tmp_path / "part"), progress=False,
                  resume=True, log=messages.append)
    assert "resumed" in messages[0]
    drop = ("seconds",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in resumed] == \
        [{k: v for k, v in r.items() if k not in drop} for r in full]


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    history = [{"epoch": 1, "train_loss": 1.0, "test_loss": 1.2, "train_accuracy": 0.5, "test_accuracy": 0.4},
               {"epoch": 2, "train_loss": 0.5, "test_loss": 0.7, "train_accuracy": 0.8, "test_accuracy": 0.7}]
    path = plot_metrics(history, str(tmp_path / "m.png"))
    assert path and (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_progress_bar_with_or_without_tqdm(capsys):
    session, loader, test = setup()
    fit(session, loader, epochs=1, test=test, progress=True, log=print)
    assert "train_loss" in capsys.readouterr().out
