"""The program that tests/test_distributed_*.py run on every rank of an MPI world (see
mpi_launch.py): `python distributed_worker.py SCENARIO ARGS...`.  Each scenario prints what the
test checks, or writes it to a file that the test reads."""
import json
import sys

import numpy as np

from minitrain import distributed


def collectives():
    """Every host collective once; rank 0 prints what every rank saw, as JSON."""
    world = distributed.init()
    assert distributed.init() is world
    seen = {"world": [world.rank, world.size, world.local_rank], "main": distributed.is_main()}
    seen["object"] = distributed.broadcast_object({"from": world.rank}, root=1)
    buffer = np.full(3, world.rank, np.float32)
    same = distributed.broadcast_array(buffer)
    seen["array_in_place"] = [same is buffer, buffer.tolist()]
    seen["array_new"] = distributed.broadcast_array(np.arange(4.0) if world.rank == 1 else None, root=1).tolist()
    seen["sum"] = distributed.allreduce_sum(np.array([world.rank + 1, 10], np.int64)).tolist()
    seen["mean"] = distributed.allreduce_mean(np.array([world.rank, 1.0], np.float64)).tolist()
    seen["scalar_sum"] = distributed.allreduce_sum(world.rank + 1)
    seen["scalar_mean"] = distributed.allreduce_mean(float(world.rank))
    distributed.barrier()
    everyone = distributed.allgather_object(seen)
    if distributed.is_main():
        print(json.dumps(everyone))


def raise_on(rank):
    """Rank `rank` raises; the others wait in a collective that it never joins."""
    world = distributed.init()
    if world.rank == int(rank):
        raise RuntimeError(f"deliberate failure on rank {world.rank}")
    distributed.barrier()


SCENARIOS = {"collectives": collectives, "raise": raise_on}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](*sys.argv[2:])
