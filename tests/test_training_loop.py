"""fit(): per-epoch metrics log, checkpoint each epoch, resume, plot, progress bar, the run
folder rules, the best checkpoint, and a diverging run."""
import json

import numpy as np
import pytest

import minitrain
from minitrain import checkpoint, nn, optim
from minitrain.data import ArrayDataset, DataLoader
from minitrain.errors import RunFolderError, TrainingDivergedError
from minitrain.providers.pending import PendingScalar, PendingValues
from minitrain.training import TrainingSession, fit, loop, plot_metrics


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
    drop = ("seconds", "steps_per_s")
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


def quiet_fit(session, loader, **kwargs):
    return fit(session, loader, progress=False, log=lambda s: None, **kwargs)


def test_a_folder_holding_a_run_is_refused_unless_resumed_or_overwritten(tmp_path):
    session, loader, test = setup()
    quiet_fit(session, loader, epochs=1, test=test, out_dir=str(tmp_path))
    first = {name: (tmp_path / name).read_bytes() for name in ("metrics.jsonl", "checkpoint.mtc")}
    session, loader, test = setup()
    with pytest.raises(RunFolderError, match="already holds a run.*--resume.*--overwrite"):
        quiet_fit(session, loader, epochs=1, test=test, out_dir=str(tmp_path))
    assert {name: (tmp_path / name).read_bytes() for name in first} == first
    with pytest.raises(RunFolderError, match="exclude"):
        quiet_fit(session, loader, epochs=1, test=test, out_dir=str(tmp_path), resume=True, overwrite=True)
    history = quiet_fit(session, loader, epochs=2, test=test, out_dir=str(tmp_path), overwrite=True)
    assert [json.loads(l)["epoch"] for l in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert history[-1]["step"] == 10


def test_resume_needs_a_checkpoint(tmp_path):
    session, loader, test = setup()
    with pytest.raises(RunFolderError, match="no checkpoint.mtc to resume"):
        quiet_fit(session, loader, epochs=1, out_dir=str(tmp_path / "new"), resume=True)
    with pytest.raises(RunFolderError, match="out_dir"):
        quiet_fit(session, loader, epochs=1, resume=True)


def test_resume_rewrites_the_log_from_the_checkpoint(tmp_path):
    """An epoch logged after the last checkpoint (a crash in between) is not logged twice."""
    session, loader, test = setup()
    quiet_fit(session, loader, epochs=2, test=test, out_dir=str(tmp_path))
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"epoch": 3, "step": 15}) + "\n")
    session, loader, test = setup()
    quiet_fit(session, loader, epochs=3, test=test, out_dir=str(tmp_path), resume=True)
    epochs = [json.loads(l)["epoch"] for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2, 3]


def test_best_checkpoint_follows_the_monitored_metric(tmp_path, monkeypatch):
    accuracies = iter([0.5, 0.8, 0.6, 0.9, 0.7])
    monkeypatch.setattr(loop, "_test_metrics", lambda *a, **k: {"test_loss": 1.0, "test_accuracy": next(accuracies)})
    session, loader, test = setup()
    quiet_fit(session, loader, epochs=5, test=test, out_dir=str(tmp_path))
    best = checkpoint.read(tmp_path / "checkpoint-best.mtc")[0]["extra"]
    last = checkpoint.read(tmp_path / "checkpoint.mtc")[0]["extra"]
    assert best["epoch"] == 4 and best["best"] == {"metric": "test_accuracy", "value": 0.9, "epoch": 4}
    assert last["epoch"] == 5 and last["best"]["epoch"] == 4


def test_a_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    session, loader, test = setup()
    quiet_fit(session, loader, epochs=2, test=test, out_dir=str(tmp_path))
    good = (tmp_path / "checkpoint.mtc").read_bytes()
    session, loader, test = setup()
    real_step, calls = session.train_step, []

    def diverging(x, y, **options):
        calls.append(1)
        loss = real_step(x, y, **options)
        if len(calls) == 3:
            return PendingScalar(PendingValues({"loss": float("nan"), "output": loss.values["output"]}), "loss")
        return loss
    monkeypatch.setattr(session, "train_step", diverging)
    with pytest.raises(TrainingDivergedError, match=r"epoch 3, step 3: the loss is nan.*keeps epoch 2"):
        quiet_fit(session, loader, epochs=4, test=test, out_dir=str(tmp_path), resume=True)
    assert (tmp_path / "checkpoint.mtc").read_bytes() == good
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 2


def test_empty_test_set_or_loader_is_refused():
    session, loader, (x, y) = setup()
    with pytest.raises(ValueError, match="test set is empty"):
        quiet_fit(session, loader, epochs=1, test=(x[:0], y[:0]))
    with pytest.raises(ValueError, match="no batches"):
        quiet_fit(session, DataLoader(ArrayDataset(x[:0], y[:0]), 8), epochs=1)
