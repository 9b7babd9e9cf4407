"""TrainingSession(data_parallel=True) on 2 CPU ranks launched by mpiexec (skipped without
mpi4py or mpiexec): the parameters after 40 SGD-momentum steps equal a one-process run on the
whole batches (plain, with gradient clipping, with micro-batches, with a summed loss, with the
gradients all-reduced in one bucket and in three),
BatchNorm statistics average over the ranks, each rank draws its own Dropout masks, and ranks
that build different models are told which parameter differs.

On CUDA (marked cuda; run on a machine with 2 GPUs, from the repository root, with mpi4py and
libnccl installed):

    PYTHONPATH=.:$PYTHONPATH mpiexec -n 2 python tests/distributed_worker.py equivalence cuda

prints the same report as the CPU test checks (captured steps: the session's default); add
`uncaptured` for the same run with CUDA Graph capture off.  test_equivalence_on_two_gpus runs
both when the machine has 2 GPUs; test_one_gpu_world_matches_one_process runs the parameter
cases in a world of one rank, whose all-reduces take the collective stream as a larger world's
do (a device copy there instead of NCCL), captured and not, on one GPU.
"""
import json

import pytest

from minitrain import nn
from minitrain.errors import DistributedUnavailableError
from minitrain.optim import SGD
from minitrain.training import TrainingSession
from distributed_worker import CASES
from mpi_launch import launch, needs_mpi

TOLERANCE = {"float32": 1e-6, "float64": 1e-12}


def check_report(report):
    for name, case in report.items():
        if name == "batchnorm":
            assert case == {"averaged": True, "ranks_differed": True, "ranks_equal": True}, case
            continue
        if name == "dropout":
            assert case == {"ranks_differ": True}, case
            continue
        tolerance = TOLERANCE["float32" if name == "float32" else "float64"]
        assert case["relative_error"] <= tolerance, (name, case)
        assert case["ranks_equal"], (name, case)
        assert case["moved"] > 1e-3, (name, case)      # the runs trained: the comparison is not vacuous


def test_data_parallel_needs_the_world():
    with pytest.raises(DistributedUnavailableError, match=r"minitrain\.distributed\.init\(\)"):
        TrainingSession(nn.Sequential(nn.Linear(4, 2)), nn.CrossEntropyLoss(), SGD(0.1), input_shape=(4,),
                        data_parallel=True)


@needs_mpi
def test_two_ranks_train_as_one_process_on_the_whole_batch():
    result = launch(2, "equivalence")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == {"float32", "float64", "clipped", "micro_batches", "sum_loss", "one_bucket",
                           "three_buckets", "batchnorm", "dropout"}
    check_report(report)


@needs_mpi
def test_ranks_with_different_models_are_told_what_differs():
    result = launch(2, "mismatch")
    assert result.returncode == 0, result.stderr
    errors = json.loads(result.stdout)
    assert sorted(e["rank"] for e in errors) == [0, 1]
    for e in errors:
        for words in ("parameters #0", "1.weight", "rank 0 has", "(3, 36)", "rank 1 has", "(4, 36)"):
            assert words in e["error"], e


@pytest.mark.cuda
@needs_mpi
@pytest.mark.parametrize("capture", ["captured", "uncaptured"])
def test_equivalence_on_two_gpus(capture):
    import pycuda.driver as cuda
    if cuda.Device.count() < 2:
        pytest.skip("needs 2 GPUs")
    result = launch(2, "equivalence", "cuda", capture, timeout=600)
    assert result.returncode == 0, result.stderr
    check_report(json.loads(result.stdout))


@pytest.mark.cuda
@needs_mpi
@pytest.mark.parametrize("capture", ["captured", "uncaptured"])
def test_one_gpu_world_matches_one_process(capture):
    result = launch(1, "parameters", "cuda", capture, timeout=600)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == set(CASES)
    check_report(report)
