"""fit() and the CLI on 2 CPU ranks launched by mpiexec (skipped without mpi4py or mpiexec):
`train lenet_digits --distributed` prints once, writes one run folder and reports metrics over
the whole test set; a run folder moves between world sizes (2 ranks -> 1 process, 1 process ->
2 ranks) and the run goes on as one process would, and on the same number of ranks it goes on
bitwise, Dropout masks included (distributed_fit_worker.py)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import distributed_fit_worker as worker
from minitrain import checkpoint, cli, nn
from minitrain.data import load_digits
from minitrain.optim import SGD
from minitrain.training import TrainingSession, evaluate
from mpi_launch import ROOT, mpiexec, needs_mpi

pytestmark = needs_mpi


def on_two_ranks(*argv, status=0, timeout=180):
    """`mpiexec -n 2 python ARGV...` from the repository root, one OpenMP thread per rank; its
    CompletedProcess, which must end with exit status `status`."""
    environment = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([mpiexec(), "-n", "2", sys.executable, *map(str, argv)], capture_output=True,
                            text=True, timeout=timeout, env=environment, cwd=ROOT)
    assert result.returncode == status, result.stdout + result.stderr
    return result


def test_cli_prints_once_writes_one_run_folder_and_reports_global_metrics(tmp_path):
    out = tmp_path / "run"
    train = ("-m", "minitrain", "train", "lenet_digits", "--distributed", "--epochs", "1", "--max-steps", "6",
             "--no-progress", "--out", out)
    stdout = on_two_ranks(*train).stdout
    lines = stdout.splitlines()
    assert sum(line.startswith("final test_accuracy=") for line in lines) == 1, stdout
    assert sum(line.startswith("epoch 1 ") for line in lines) == 1, stdout
    assert sorted(os.listdir(tmp_path)) == ["run"]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 1 and records[0]["step"] == 6

    # the reported test metrics are those of the whole test set, with the checkpoint's parameters
    # and averaged BatchNorm statistics, evaluated here in one process
    example = cli.load_example("lenet_digits")
    model = example.build_model()
    _, arrays, _ = checkpoint.read(out / "checkpoint.mtc")
    model.load_state_dict(arrays)
    session = TrainingSession(model, nn.CrossEntropyLoss(), SGD(0.1), input_shape=example.INPUT_SHAPE)
    data = load_digits()
    expected = evaluate(session, data.x_test, data.y_test)
    assert records[0]["test_loss"] == pytest.approx(expected["test_loss"], rel=1e-5)
    assert abs(records[0]["test_accuracy"] - expected["test_accuracy"]) <= 1 / len(data.y_test)

    # a run folder refused on rank 0, or a global batch that does not split over the ranks, stops
    # both ranks with one error line
    refused = on_two_ranks(*train, status=2)
    assert refused.stderr.count("already holds a run") == 1, refused.stderr
    refused = on_two_ranks(*train[:-2], "--batch-size", "33", status=2)
    assert refused.stderr.count("must split evenly over the 2 ranks") == 1, refused.stderr


def run_worker_on_two_ranks(out_dir, epochs, mode, result_path, *flags):
    stdout = on_two_ranks(os.path.join(ROOT, "tests", "distributed_fit_worker.py"), out_dir, epochs, mode,
                          result_path, "--distributed", *flags).stdout
    with open(result_path) as f:
        return stdout, json.load(f)


def assert_same_run(result, reference):
    for name, expected in reference["params"].items():
        np.testing.assert_allclose(result["params"][name], expected, rtol=1e-10, atol=1e-13, err_msg=name)
    assert len(result["history"]) == len(reference["history"])
    for record, expected in zip(result["history"], reference["history"]):
        for key in ("epoch", "step", "train_loss", "train_accuracy", "test_loss", "test_accuracy"):
            assert record[key] == pytest.approx(expected[key], rel=1e-10), (record["epoch"], key)


def test_a_run_moves_between_world_sizes_and_goes_on_as_one_process(tmp_path):
    reference = worker.train(str(tmp_path / "one"), 2, resume=False)

    # 2 ranks for epoch 1, then one process resumes epoch 2
    stdout, first = run_worker_on_two_ranks(tmp_path / "two_then_one", 1, "fresh", tmp_path / "first.json")
    assert sum(line.startswith("epoch 1 ") for line in stdout.splitlines()) == 1, stdout
    assert len((tmp_path / "two_then_one" / "metrics.jsonl").read_text().splitlines()) == 1
    assert_same_run(first, worker.train(str(tmp_path / "one_epoch"), 1, resume=False))
    rank0, rank1 = first["served"]
    assert len(rank0) == len(rank1) == worker.TRAIN // 2, "each rank trains on half of the epoch"
    assert sorted(rank0 + rank1) == list(range(worker.TRAIN))
    assert_same_run(worker.train(str(tmp_path / "two_then_one"), 2, resume=True), reference)

    # one process for epoch 1, then 2 ranks resume epoch 2
    worker.train(str(tmp_path / "one_then_two"), 1, resume=False)
    stdout, second = run_worker_on_two_ranks(tmp_path / "one_then_two", 2, "resume", tmp_path / "second.json")
    assert sum(line.startswith("resumed from") for line in stdout.splitlines()) == 1, stdout
    assert_same_run(second, reference)


def test_two_ranks_resume_bitwise_with_their_own_dropout_masks(tmp_path):
    _, whole = run_worker_on_two_ranks(tmp_path / "whole", 2, "fresh", tmp_path / "whole.json", "--dropout")
    run_worker_on_two_ranks(tmp_path / "parts", 1, "fresh", tmp_path / "first.json", "--dropout")
    _, resumed = run_worker_on_two_ranks(tmp_path / "parts", 2, "resume", tmp_path / "resumed.json", "--dropout")
    assert resumed["params"] == whole["params"]
    drop = ("seconds", "steps_per_s")
    assert [{k: v for k, v in r.items() if k not in drop} for r in resumed["history"]] == \
        [{k: v for k, v in r.items() if k not in drop} for r in whole["history"]]
