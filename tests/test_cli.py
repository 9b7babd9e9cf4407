"""The command line's bad arguments: each ends the program with the usage and one `error:` line,
exit status 2, never a traceback or a silent default; and gradcheck's outputs without a gradient
(skipped, and said so)."""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from minitrain import cli, gradcheck
from minitrain.errors import GradcheckError
from minitrain.gradcheck import NoGradientWarning

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE = ["--epochs", "1", "--max-steps", "1", "--no-progress"]
HAS_PYCUDA = importlib.util.find_spec("pycuda") is not None


def assert_usage_error(capsys, argv, message, main=cli.main):
    """main(argv) exits with status 2 after one `error:` line holding `message`."""
    with pytest.raises(SystemExit) as raised:
        main(argv)
    err = capsys.readouterr().err
    assert raised.value.code == 2, (raised.value.code, err)
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("option,value,message", [
    ("--epochs", "0", "argument --epochs: expected an integer >= 1, got 0"),
    ("--epochs", "-3", "argument --epochs: expected an integer >= 1, got -3"),
    ("--batch-size", "0", "argument --batch-size: expected an integer >= 1, got 0"),
    ("--max-steps", "0", "argument --max-steps: expected an integer >= 1, got 0"),
    ("--max-steps", "-1", "argument --max-steps: expected an integer >= 1, got -1"),
    ("--lr", "0", "argument --lr: expected a finite number > 0, got 0"),
    ("--lr", "-1", "argument --lr: expected a finite number > 0, got -1"),
    ("--lr", "nan", "argument --lr: expected a finite number > 0, got nan"),
    ("--seed", "-1", "argument --seed: expected an integer >= 0, got -1"),
])
def test_train_refuses_bad_numbers(capsys, option, value, message):
    argv = SMOKE + [option, value]
    assert_usage_error(capsys, ["train", "lenet_digits"] + argv, message)
    example = cli.load_example("lenet_digits")
    assert_usage_error(capsys, argv, message, main=lambda a: cli.run_example(example.run, "LeNet", example.DEFAULTS, a))


@pytest.mark.skipif(HAS_PYCUDA, reason="pycuda is installed: --device cuda may run here")
def test_train_on_a_missing_device(capsys):
    assert_usage_error(capsys, ["train", "lenet_digits", "--device", "cuda"] + SMOKE,
                       "--device cuda: the 'cuda' provider needs pycuda")


def test_train_refuses_bad_paths(capsys, tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("")
    assert_usage_error(capsys, ["train", "no_such_example"], "unknown example 'no_such_example'")
    assert_usage_error(capsys, ["train", "lenet_digits", "--out", str(a_file)] + SMOKE,
                       f"--out {a_file}: a file, not a run folder")
    assert_usage_error(capsys, ["train", "lenet_digits", "--profile", str(tmp_path / "no" / "t.json")] + SMOKE,
                       f"--profile {tmp_path / 'no' / 't.json'}: the folder {tmp_path / 'no'} does not exist")
    assert_usage_error(capsys, ["train", str(tmp_path / "none.onnx"), "--data", "digits", "--out", str(tmp_path)],
                       "no such ONNX file")
    assert_usage_error(capsys, ["train", "lenet_digits", "--profile", str(tmp_path)] + SMOKE,
                       f"--profile {tmp_path}: a folder, not a file")


def test_train_refuses_a_folder_that_holds_a_run(capsys, tmp_path):
    assert cli.main(["train", "lenet_digits", "--out", str(tmp_path)] + SMOKE) == 0
    capsys.readouterr()
    assert_usage_error(capsys, ["train", "lenet_digits", "--out", str(tmp_path)] + SMOKE, "already holds a run")


def test_export_refuses_bad_arguments(capsys, tmp_path):
    pytest.importorskip("onnx")
    out = str(tmp_path / "m.onnx")
    assert_usage_error(capsys, ["export", "lenet_digits", out, "--seed", "-1"],
                       "argument --seed: expected an integer >= 0, got -1")
    assert_usage_error(capsys, ["export", "no_such_example", out], "unknown example 'no_such_example'")
    assert_usage_error(capsys, ["export", "lenet_digits", str(tmp_path / "no" / "m.onnx")],
                       f"the folder {tmp_path / 'no'} does not exist")
    assert_usage_error(capsys, ["export", "lenet_digits", str(tmp_path)], f"output {tmp_path}: a folder, not a file")
    assert_usage_error(capsys, ["export", "lenet_digits", out, "--checkpoint", str(tmp_path / "none.mtc")],
                       "no such checkpoint")


@pytest.mark.parametrize("argv,message", [
    (["Relu", "--input", "2,x"], "--input '2,x': expected"),
    (["Relu", "--input", "int:3"], "--input 'int:3': expected int:SHAPE:HIGH"),
    (["Relu", "--input", "int:3:0"], "--input 'int:3:0': expected int:SHAPE:HIGH"),
    (["Relu", "--input", "scalar:x"], "--input 'scalar:x': 'x' is not a number"),
    (["Conv", "--input", "1,2,5,5", "--input", "3,2,3,3", "--attr", "pads=a"],
     "--attr 'pads=a': Conv's pads is of kind ints"),
    (["Relu", "--input", "2,3", "--attr", "alpha"], "--attr expects NAME=VALUE, got 'alpha'"),
    (["Relu", "--input", "2,3", "--attr", "alpha=1"], "Relu: unknown attribute 'alpha'"),
    (["Conv", "--input", "1,2,5,5", "--input", "3,4,3,3"], "Conv: input 'W' (3, 4, 3, 3) has 4 input channels"),
    (["NoSuchOp", "--input", "2,3"], "unknown op 'NoSuchOp'"),
    (["Relu", "--input", "2,3", "--domain", "no.such"], "unknown op 'Relu' in domain 'no.such'"),
    (["Relu", "--input", "2,3", "--output", "Z"], "Relu: unknown output 'Z'"),
    (["Relu", "--input", "2,3", "--wrt", "5"], "wrt input #5 is absent"),
    (["Relu", "--input", "2,3", "--wrt", "a"], "argument --wrt: expected input indices such as 0,1, got 'a'"),
    (["Relu", "--input", "2,3", "--eps", "0"], "argument --eps: expected a finite number > 0, got 0"),
    (["Relu", "--input", "2,3", "--rtol", "-1"], "argument --rtol: expected a finite number >= 0, got -1"),
    (["Relu", "--input", "2,3", "--atol", "inf"], "argument --atol: expected a finite number >= 0, got inf"),
    (["Relu", "--input", "2,3", "--seed", "-1"], "argument --seed: expected an integer >= 0, got -1"),
    (["SoftmaxCrossEntropyLoss", "--input", "4,5", "--input", "int:4:5", "--output", "log_prob"],
     "no checked output has a gradient"),
])
def test_gradcheck_refuses_bad_arguments(capsys, argv, message):
    assert_usage_error(capsys, ["gradcheck"] + argv, message)


@pytest.mark.skipif(HAS_PYCUDA, reason="pycuda is installed: --provider cuda may run here")
def test_gradcheck_on_a_missing_device(capsys):
    assert_usage_error(capsys, ["gradcheck", "Relu", "--input", "2,3", "--provider", "cuda"],
                       "--provider cuda: the 'cuda' provider needs pycuda")


def test_gradcheck_skips_outputs_without_gradient(capsys):
    """SoftmaxCrossEntropyLoss's log_prob has no gradient: skipped and said so, the loss passes."""
    assert cli.main(["gradcheck", "SoftmaxCrossEntropyLoss", "--input", "4,5", "--input", "int:4:5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "gradcheck SoftmaxCrossEntropyLoss: output 'log_prob' has no gradient; skipped"
    assert lines[1].startswith("gradcheck SoftmaxCrossEntropyLoss: input #0 shape (4, 5) ok")


def test_gradcheck_function_skips_outputs_without_gradient():
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((4, 5)), np.array([1, 2, 3, 0])]
    with pytest.warns(NoGradientWarning, match="output 'log_prob' has no gradient; skipped"):
        assert list(gradcheck("SoftmaxCrossEntropyLoss", inputs)) == [0]
    with pytest.raises(GradcheckError, match="no checked output has a gradient"):
        gradcheck("SoftmaxCrossEntropyLoss", inputs, outputs=["log_prob"])
    with pytest.raises(GradcheckError, match="wrt input #1 is of dtype int64"):
        gradcheck("SoftmaxCrossEntropyLoss", inputs, wrt=[1], outputs=["output"])


def test_the_program_prints_no_traceback():
    """The whole program, as a user runs it: usage, one error line, status 2."""
    done = subprocess.run([sys.executable, "-m", "minitrain", "train", "lenet_digits", "--epochs", "-3"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == ("python -m minitrain train: error: argument --epochs: expected an "
                                            "integer >= 1, got -3")
    assert "Traceback" not in done.stderr
