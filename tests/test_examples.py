"""Smoke runs of every example (a few steps each) and of the command line."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from minitrain import cli

EXAMPLES = ["lenet_digits", "cnn1d_mnist1d", "conv3d_volumes", "convtranspose_autoencoder"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_smoke_run(name, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MINITRAIN_CACHE_DIR", str(tmp_path / "cache"))
    module = cli.load_example(name)
    result = module.run(epochs=2, max_steps=3, seed=0, out=str(tmp_path / "run"), progress=False)
    lines = capsys.readouterr().out.strip().splitlines()
    key = "test_mse" if name.startswith("convtranspose") else "test_accuracy"
    assert lines[-1] == f"final {key}={result:.{5 if key == 'test_mse' else 4}f}"
    assert np.isfinite(result)
    assert {"checkpoint.mtc", "checkpoint-best.mtc", "metrics.jsonl"} <= set(os.listdir(tmp_path / "run"))
    with open(tmp_path / "run" / "metrics.jsonl") as f:
        assert len(f.readlines()) == 2


def test_every_example_is_smoke_tested():
    # mlp_digits (the graph API without the front end) has its own test
    assert set(cli.available_examples()) - {"mlp_digits"} == set(EXAMPLES)


def test_train_command_end_to_end(tmp_path):
    result = subprocess.run([sys.executable, "-m", "minitrain", "train", "lenet_digits", "--epochs", "1",
                             "--max-steps", "3", "--batch-size", "16", "--lr", "0.01", "--seed", "3",
                             "--out", str(tmp_path), "--no-progress"],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("final test_accuracy=") and 0 <= float(last.split("=")[1]) <= 1


def _train(out, *extra):
    return cli.main(["train", "lenet_digits", "--epochs", "1", "--max-steps", "2", "--batch-size", "16",
                     "--out", str(out), "--no-progress", *extra])


def test_train_command_run_folder_rules(tmp_path, capsys):
    """--out refuses a folder holding a run; --resume continues it, --overwrite replaces it."""
    out = tmp_path / "a"
    assert _train(out) == 0
    first = {name: (out / name).read_bytes() for name in ("metrics.jsonl", "checkpoint.mtc", "checkpoint-best.mtc")}
    with pytest.raises(SystemExit, match="already holds a run.*--resume.*--overwrite"):
        _train(out)
    assert {name: (out / name).read_bytes() for name in first} == first
    assert _train(out, "--epochs", "2", "--resume") == 0
    assert "resumed from" in capsys.readouterr().out
    assert [json.loads(l)["epoch"] for l in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert _train(out, "--overwrite") == 0
    assert [json.loads(l)["epoch"] for l in (out / "metrics.jsonl").read_text().splitlines()] == [1]
    with pytest.raises(SystemExit, match="no checkpoint.mtc to resume"):
        _train(tmp_path / "b", "--resume")
    with pytest.raises(SystemExit):
        _train(out, "--resume", "--overwrite")
    with pytest.raises(SystemExit):
        cli.main(["train", "lenet_digits", "--resume"])
    assert "--resume needs --out" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["../../x", "/tmp/x", "x.py", "sub/x", ".hidden", ""])
def test_train_command_takes_file_stems_not_paths(name, tmp_path, monkeypatch):
    """Only examples/<stem>.py runs: a path such as ../../x must not import an arbitrary file."""
    (tmp_path / "examples").mkdir()
    (tmp_path / "x.py").write_text("raise RuntimeError('ran a file outside examples/')\n")
    monkeypatch.chdir(tmp_path / "examples")
    with pytest.raises(SystemExit, match="file stem"):
        cli.main(["train", name])


def test_train_command_names_unknown_examples(capsys):
    with pytest.raises(SystemExit, match="lenet_digits"):
        cli.main(["train", "no_such_example"])


def test_gradcheck_command(capsys):
    assert cli.main(["gradcheck", "Conv", "--input", "1,2,5,5", "--input", "3,2,3,3", "--attr", "pads=1,1,1,1",
                     "--attr", "strides=2,2"]) == 0
    out = capsys.readouterr().out
    assert out.count(" ok, max abs error") == 2
    assert cli.main(["gradcheck", "BatchNormalization", "--shape", "4,3,2", "--input", "3", "--input", "3",
                     "--input", "3", "--input", "3", "--attr", "training_mode=1", "--output", "Y",
                     "--wrt", "0,1,2"]) == 0
    assert cli.main(["gradcheck", "SoftmaxCrossEntropyLoss", "--input", "4,3", "--input", "int:4:3",
                     "--attr", "reduction=sum", "--output", "output"]) == 0
    assert cli.main(["gradcheck", "Dropout", "--input", "3,4", "--input", "scalar:0.3", "--input", "true",
                     "--attr", "seed=1", "--output", "output"]) == 0
