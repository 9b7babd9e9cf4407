"""The program that tests/test_distributed_*.py run on every rank of an MPI world (see
mpi_launch.py): `python distributed_worker.py SCENARIO ARGS...`.  Each scenario prints what the
test checks, or writes it to a file that the test reads."""
import json
import sys

import numpy as np

import minitrain
from minitrain import distributed, nn, providers
from minitrain.optim import SGD
from minitrain.training import TrainingSession

STEPS, GLOBAL_BATCH = 40, 8
# the equivalence cases: a one-process run on whole batches against 2 ranks on x[rank::2]
CASES = {"float32": {"dtype": "float32"}, "float64": {"dtype": "float64"},
         "clipped": {"dtype": "float64", "max_grad_norm": 0.05},
         "micro_batches": {"dtype": "float64", "micro_batches": 2},
         "sum_loss": {"dtype": "float64", "reduction": "sum"},
         "one_bucket": {"dtype": "float64", "gradient_buckets": 1},
         "three_buckets": {"dtype": "float64", "gradient_buckets": 3}}


def collectives():
    """Every host collective once; rank 0 prints what every rank saw, as JSON."""
    world = distributed.init()
    assert distributed.init() is world
    seen = {"world": [world.rank, world.size, world.local_rank], "main": distributed.is_main(),
            "device": providers.device_index()}
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
    main = distributed.is_main()
    distributed.shutdown()
    try:
        distributed.init()
    except minitrain.errors.DistributedUnavailableError as e:
        restart = str(e)
    if main:
        print(json.dumps({"ranks": everyone, "after_shutdown": [distributed.world(), restart,
                                                                providers.device_index()]}))


def raise_on(rank):
    """Rank `rank` raises; the others wait in a collective that it never joins."""
    world = distributed.init()
    if world.rank == int(rank):
        raise RuntimeError(f"deliberate failure on rank {world.rank}")
    distributed.barrier()


def small_cnn(seed, dtype):
    minitrain.random.seed(seed)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Relu(), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))
    return model.to_dtype(dtype)


def make_session(model, device, capture, *, max_grad_norm=None, reduction="mean", data_parallel=True,
                 gradient_buckets=None, **_):
    optimizer = SGD(0.05 if reduction == "mean" else 0.01, momentum=0.9, max_grad_norm=max_grad_norm)
    return TrainingSession(model, nn.CrossEntropyLoss(reduction=reduction), optimizer, input_shape=(1, 6, 6),
                           device=device, capture=capture, data_parallel=data_parallel,
                           gradient_buckets=gradient_buckets if data_parallel else None)


def batches(dtype):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((STEPS, GLOBAL_BATCH, 1, 6, 6)).astype(dtype)
    return x, rng.integers(0, 3, (STEPS, GLOBAL_BATCH))


def equivalence(device="cpu", capture="captured"):
    """parameters(), then the BatchNorm and Dropout checks; rank 0 prints the report."""
    world = distributed.init()
    report = parameter_equivalence(world, device, capture)
    report["batchnorm"] = batchnorm_statistics(world, device)
    report["dropout"] = dropout_streams(world, device)
    if world.rank == 0:
        print(json.dumps(report))


def parameters(device="cpu", capture="captured"):
    """parameter_equivalence alone (any world size, one rank too); rank 0 prints the report."""
    world = distributed.init()
    report = parameter_equivalence(world, device, capture)
    if world.rank == 0:
        print(json.dumps(report))


def parameter_equivalence(world, device, capture):
    """Every case of CASES: the world's ranks (each model initialised differently: rank 0's wins
    by the broadcast) against rank 0's one-process run; per case (on rank 0), the largest
    parameter difference relative to the parameter's largest magnitude, and whether the ranks
    agree."""
    report = {}
    for name, case in CASES.items():
        dtype, micro = case["dtype"], case.get("micro_batches", 1)
        x, y = batches(dtype)
        model = small_cnn(100 + world.rank, dtype)
        captured = capture == "captured"
        session = make_session(model, device, captured, **case)
        reference = make_session(small_cnn(100, dtype), device, captured, data_parallel=False, **case) \
            if world.rank == 0 else None
        for step in range(STEPS):
            session.train_step(x[step, world.rank::world.size], y[step, world.rank::world.size], micro_batches=micro)
            if reference is not None:
                reference.train_step(x[step], y[step], micro_batches=micro)
        session.pull()
        mine = {n: p.data.copy() for n, p in model.named_parameters()}
        everyone = distributed.allgather_object(mine)
        if reference is not None:
            reference.pull()
            expected = {n: p.data for n, p in reference.model.named_parameters()}
            initial = {n: p.data for n, p in small_cnn(100, dtype).named_parameters()}
            report[name] = {
                "relative_error": max(float(np.max(np.abs(mine[n] - e)) / np.max(np.abs(e)))
                                      for n, e in expected.items()),
                "ranks_equal": all(np.array_equal(other[n], mine[n]) for other in everyone for n in mine),
                "moved": max(float(np.max(np.abs(mine[n] - initial[n]))) for n in mine),
            }
    return report


def batchnorm_statistics(world, device):
    """One step on each rank's own data, then average_batchnorm_statistics: whether every rank
    then holds the mean over the ranks of the statistics each had."""
    minitrain.random.seed(3)
    model = nn.Sequential(nn.Flatten(), nn.Linear(36, 5), nn.BatchNorm1d(5), nn.Relu(), nn.Linear(5, 3))
    session = TrainingSession(model, nn.CrossEntropyLoss(), SGD(0.1), input_shape=(1, 6, 6), device=device,
                              data_parallel=True)
    rng = np.random.default_rng(world.rank)
    session.train_step(rng.standard_normal((4, 1, 6, 6)).astype(np.float32) + world.rank, np.arange(4) % 3)
    session.pull()
    own = {n: b.data.copy() for n, b in model.named_buffers()}
    session.average_batchnorm_statistics()
    session.pull()
    before = distributed.allgather_object(own)
    after = distributed.allgather_object({n: b.data.copy() for n, b in model.named_buffers()})
    return {"averaged": all(np.allclose(after[world.rank][n], np.mean([b[n] for b in before], axis=0), rtol=1e-6)
                            for n in own),
            "ranks_differed": any(not np.array_equal(before[0][n], before[1][n]) for n in own),
            "ranks_equal": all(np.array_equal(a[n], after[0][n]) for a in after for n in own)}


def dropout_streams(world, device):
    """Every rank seeds minitrain.random alike, then builds a session with Dropout: whether the
    ranks then draw different masks (their generators differ)."""
    minitrain.random.seed(5)
    model = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(36, 3))
    TrainingSession(model, nn.CrossEntropyLoss(), SGD(0.1), input_shape=(1, 6, 6), device=device,
                    data_parallel=True)
    draws = distributed.allgather_object(float(minitrain.random.generator().random()))
    return {"ranks_differ": len(set(draws)) == world.size}


def mismatch():
    """Rank 1 builds a wider model than rank 0: every rank must raise WorldMismatchError.  Rank 0
    prints every rank's message as one JSON list (lines of two ranks may interleave)."""
    world = distributed.init()
    model = nn.Sequential(nn.Flatten(), nn.Linear(36, 3 + world.rank))
    error = None
    try:
        TrainingSession(model, nn.CrossEntropyLoss(), SGD(0.1), input_shape=(1, 6, 6), data_parallel=True)
    except minitrain.errors.WorldMismatchError as e:
        error = {"rank": world.rank, "error": str(e)}
    errors = distributed.collectives.allgather_object(error)
    if world.rank == 0:
        print(json.dumps([e for e in errors if e is not None]), flush=True)


SCENARIOS = {"collectives": collectives, "raise": raise_on, "equivalence": equivalence, "parameters": parameters,
             "mismatch": mismatch}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](*sys.argv[2:])
