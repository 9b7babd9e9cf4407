"""The graph-API example trains: its loss falls and it beats chance by far on held-out digits."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import mlp_digits  # noqa: E402


def test_mlp_digits_loss_falls(capsys):
    accuracy = mlp_digits.main(["--epochs", "4"])
    out = capsys.readouterr().out
    losses = [float(v) for v in re.findall(r"train loss ([0-9.]+)", out)]
    assert len(losses) == 4 and losses[-1] < 0.5 * losses[0], losses
    assert accuracy > 0.85
    assert re.search(r"^final test_accuracy=0\.\d+$", out, re.M)
