"""The MPI world and host collectives of minitrain.distributed, on 2 CPU processes launched by
mpiexec (skipped without mpi4py or mpiexec), and what happens without MPI."""
import json
import subprocess
import sys

import pytest

from minitrain import distributed
from minitrain.errors import DistributedUnavailableError
from mpi_launch import ROOT, launch, needs_mpi


def test_import_minitrain_does_not_start_mpi():
    code = "import sys, minitrain, minitrain.distributed; assert 'mpi4py' not in sys.modules, 'mpi4py imported'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                            env={"PYTHONPATH": ROOT})
    assert result.returncode == 0, result.stderr


def test_init_without_mpi4py_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    with pytest.raises(DistributedUnavailableError, match=r'pip install -e "\.\[distributed\]"'):
        distributed.init()
    assert distributed.world() is None


def test_collectives_outside_a_world_are_those_of_a_world_of_one():
    assert distributed.world() is None and distributed.is_main()
    assert distributed.allreduce_mean(3) == 3.0 and distributed.allreduce_sum([1, 2]).tolist() == [1, 2]
    assert distributed.broadcast_object("x") == "x" and distributed.allgather_object(5) == [5]
    distributed.barrier()


@needs_mpi
def test_world_collectives_and_shutdown_on_two_ranks():
    result = launch(2, "collectives")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    world, restart, device = report["after_shutdown"]
    assert world is None and "already finalised" in restart and device is None
    for rank, seen in enumerate(report["ranks"]):
        assert seen["world"] == [rank, 2, rank]          # one host: local rank = rank
        assert seen["device"] == rank                    # the GPU a CUDA provider would take
        assert seen["main"] == (rank == 0)
        assert seen["object"] == {"from": 1}
        assert seen["array_in_place"] == [True, [0.0, 0.0, 0.0]]
        assert seen["array_new"] == [0.0, 1.0, 2.0, 3.0]
        assert seen["sum"] == [3, 20] and seen["mean"] == [0.5, 1.0]
        assert seen["scalar_sum"] == 3 and seen["scalar_mean"] == 0.5


@needs_mpi
def test_a_rank_that_raises_ends_every_rank_with_its_error():
    result = launch(2, "raise", 1, timeout=60)
    assert result.returncode != 0
    assert "[rank 1] RuntimeError: deliberate failure on rank 1" in result.stderr, result.stderr
