"""The README stays true: its Python training example runs and trains, and every repository path
it names exists."""
import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
PATH = re.compile(r"(?<![\w./-])(?:\.\./)*((?:minitrain|tests|bench|examples|ext|cuda|docs|\.ci)/[\w.*/-]*|"
                  r"setup\.py|pyproject\.toml|[A-Z][A-Z_]*\.md)")


def readme():
    with open(README) as f:
        return f.read()


def training_example():
    """The first Python block after the "Training, the short way" heading that calls fit."""
    section = readme().split("## Training, the short way", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    return next(block for block in blocks if "fit(" in block)


def test_readme_training_example_trains(capsys):
    namespace = {}
    exec(compile(training_example(), "README.md", "exec"), namespace)
    history, metrics = namespace["history"], namespace["metrics"]
    assert len(history) == namespace["epochs"] and history[-1]["train_loss"] < history[0]["train_loss"]
    assert metrics["test_accuracy"] > 0.9
    assert "test accuracy" in capsys.readouterr().out


def test_readme_names_only_files_in_the_repository():
    names = sorted({m.group(1).rstrip(".") for m in PATH.finditer(readme())})
    assert "minitrain/training/" in names and "setup.py" in names, "the pattern finds the README's paths"
    missing = [n for n in names if not glob.glob(os.path.join(ROOT, n))]
    assert not missing, f"README.md names paths that are not in the repository: {missing}"
