"""The ONNX commands: `python -m minitrain export <example> out.onnx [--checkpoint]` and
`python -m minitrain train model.onnx --data digits|mnist1d --out DIR`.  Short runs (an epoch,
a few steps); ONNX's reference evaluator judges the exported files.  Skips without onnx."""
import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import minitrain  # noqa: E402
import minitrain.onnx as mx  # noqa: E402
from minitrain import cli, nn  # noqa: E402
from minitrain.checkpoint import read  # noqa: E402
from minitrain.data import load_digits  # noqa: E402
from minitrain.executor import Executor  # noqa: E402
from minitrain.nn.module import trace  # noqa: E402
from minitrain.nn.graph_module import trainable_initializers  # noqa: E402
from minitrain.scheduler import schedule  # noqa: E402
from minitrain.training import TrainingSession  # noqa: E402
from minitrain.training.loop import evaluate  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPORTABLE = ["lenet_digits", "cnn1d_mnist1d", "conv3d_volumes", "convtranspose_autoencoder"]


def initializers(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


def minitrain_eval(model, input_shape, x):
    """The model's inference output computed by minitrain's kernels."""
    builder, _ = trace(model, {"input": (np.dtype(np.float32), ("N",) + tuple(input_shape))}, training=False)
    graph = builder.graph
    return Executor(schedule(graph, graph.outputs)).run({"input": x})[graph.outputs[0]]


@pytest.mark.parametrize("name", EXPORTABLE)
def test_export_writes_the_example_model(name, tmp_path, capsys):
    out = tmp_path / f"{name}.onnx"
    assert cli.main(["export", name, str(out), "--seed", "5"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    example = cli.load_example(name)
    minitrain.random.seed(5)
    reference = example.build_model()
    x = np.random.default_rng(0).standard_normal((3,) + example.INPUT_SHAPE).astype(np.float32)
    expected = minitrain_eval(reference, example.INPUT_SHAPE, x)
    got = ReferenceEvaluator(model).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_export_takes_the_parameters_of_a_checkpoint(tmp_path):
    run = tmp_path / "run"
    assert cli.main(["train", "lenet_digits", "--epochs", "1", "--max-steps", "3", "--out", str(run),
                     "--no-progress"]) == 0
    assert cli.main(["export", "lenet_digits", str(tmp_path / "trained.onnx"), "--checkpoint",
                     str(run / "checkpoint.mtc")]) == 0
    assert cli.main(["export", "lenet_digits", str(tmp_path / "initial.onnx")]) == 0
    _, arrays, _ = read(run / "checkpoint.mtc")
    trained, initial = initializers(tmp_path / "trained.onnx"), initializers(tmp_path / "initial.onnx")
    assert set(trained) == set(arrays)
    for name, array in arrays.items():
        np.testing.assert_array_equal(trained[name], array)
    assert any(not np.array_equal(initial[n], arrays[n]) for n in arrays)


def test_export_refuses_what_it_cannot_export(tmp_path):
    with pytest.raises(SystemExit, match="no such checkpoint"):
        cli.main(["export", "lenet_digits", str(tmp_path / "m.onnx"), "--checkpoint", str(tmp_path / "none.mtc")])
    run = tmp_path / "run"
    cli.main(["train", "lenet_digits", "--epochs", "1", "--max-steps", "1", "--out", str(run), "--no-progress"])
    with pytest.raises(SystemExit, match="does not hold a model of example 'cnn1d_mnist1d'"):
        cli.main(["export", "cnn1d_mnist1d", str(tmp_path / "m.onnx"), "--checkpoint", str(run / "checkpoint.mtc")])
    assert not (tmp_path / "m.onnx").exists()


def small_cnn_file(path, input_shape=(1, 8, 8)):
    """A Conv-BatchNorm-Relu-MaxPool-Linear classifier saved as .onnx by minitrain."""
    minitrain.random.seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Relu(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(8 * 4 * 4, 10))
    mx.save(model, path, input_shape=input_shape)
    return path


def test_train_an_onnx_file_writes_the_trained_model_beside_the_checkpoint(tmp_path, capsys):
    source = small_cnn_file(tmp_path / "cnn.onnx")
    run = tmp_path / "run"
    assert cli.main(["train", str(source), "--data", "digits", "--out", str(run), "--epochs", "2",
                     "--max-steps", "10", "--no-progress"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == f"wrote {run / 'cnn.onnx'}"
    accuracy = float(lines[-2].split("final test_accuracy=")[1])
    assert {"checkpoint.mtc", "checkpoint-best.mtc", "metrics.jsonl", "cnn.onnx"} <= set(os.listdir(run))
    onnx.checker.check_model(onnx.load(str(run / "cnn.onnx")), full_check=True)
    before, after = initializers(source), initializers(run / "cnn.onnx")
    _, arrays, _ = read(run / "checkpoint.mtc")
    for name in arrays:
        np.testing.assert_array_equal(after[name], arrays[name])
    statistics = [n for n in before if n.endswith(("running_mean", "running_var"))]
    assert statistics and all(np.array_equal(before[n], after[n]) for n in statistics)
    assert not np.array_equal(before["0.weight"], after["0.weight"])
    # the written model is the trained one: it scores the accuracy the run reported
    data = load_digits()
    graph = mx.load(run / "cnn.onnx")
    session = TrainingSession.from_graph(graph, nn.CrossEntropyLoss(), minitrain.optim.SGD(0.1),
                                         trainable=trainable_initializers(graph))
    assert round(evaluate(session, data.x_test, data.y_test)["test_accuracy"], 4) == round(accuracy, 4)


def test_train_an_onnx_file_reshapes_samples_to_the_model_input(tmp_path, capsys):
    model = nn.Sequential(nn.Linear(40, 16), nn.Relu(), nn.Linear(16, 10))
    mx.save(model, tmp_path / "mlp.onnx", input_shape=(40,))
    assert cli.main(["train", str(tmp_path / "mlp.onnx"), "--data", "mnist1d", "--out", str(tmp_path / "run"),
                     "--epochs", "1", "--max-steps", "3", "--no-progress"]) == 0
    assert (tmp_path / "run" / "mlp.onnx").exists()
    with pytest.raises(SystemExit, match=r"takes samples of shape \(40,\); the digits samples are \(1, 8, 8\)"):
        cli.main(["train", str(tmp_path / "mlp.onnx"), "--data", "digits", "--out", str(tmp_path / "run2")])


def test_train_an_onnx_file_needs_data_and_out(tmp_path, capsys):
    source = small_cnn_file(tmp_path / "cnn.onnx")
    with pytest.raises(SystemExit):
        cli.main(["train", str(source), "--out", str(tmp_path / "run")])
    assert "needs --data" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["train", str(source), "--data", "digits"])
    assert "needs --out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["train", "lenet_digits", "--data", "digits"])
    assert "an example brings its own data" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="no such ONNX file"):
        cli.main(["train", str(tmp_path / "missing.onnx"), "--data", "digits", "--out", str(tmp_path / "run")])


def test_train_an_onnx_file_from_the_command_line(tmp_path):
    source = small_cnn_file(tmp_path / "cnn.onnx")
    result = subprocess.run([sys.executable, "-m", "minitrain", "train", str(source), "--data", "digits",
                             "--out", str(tmp_path / "run"), "--epochs", "1", "--max-steps", "3", "--no-progress"],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == f"wrote {tmp_path / 'run' / 'cnn.onnx'}"


@pytest.mark.parametrize("command", [["export", "lenet_digits", "m.onnx"],
                                     ["train", "m.onnx", "--data", "digits", "--out", "run"]])
def test_the_onnx_commands_without_onnx_say_how_to_install_it(command, tmp_path):
    small_cnn_file(tmp_path / "m.onnx")
    code = ("import sys; sys.modules['onnx'] = None\n"
            f"from minitrain import cli; cli.main({command!r})\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert result.returncode == 1 and "pip install minitrain[onnx]" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()
