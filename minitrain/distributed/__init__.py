"""Data-parallel training over MPI (processes, bootstrap, CPU collectives) and NCCL (GPU
collectives), as ONNX Runtime training does.

    world = minitrain.distributed.init()          # launched as: mpiexec -n 2 python train.py
    session = TrainingSession(model, loss, SGD(lr=0.1), input_shape=..., data_parallel=True)

Every rank trains the same model on its share of each global batch; the training graph sums the
gradients of all ranks before the optimizer update: one all-reduce of one fused buffer per step,
or one per bucket of gradients (StartAllReduce / WaitAllReduce, started as soon as the backward
pass has produced the bucket),
so every rank applies the update of the global batch.  mpi4py is imported by
init() only: `import minitrain` never starts MPI.
"""
from .collectives import allgather_object, allreduce_mean, allreduce_sum, broadcast_array, broadcast_object
from .world import World, barrier, init, is_main, shutdown, world

__all__ = ["World", "init", "world", "barrier", "is_main", "shutdown", "broadcast_object", "broadcast_array",
           "allgather_object", "allreduce_sum", "allreduce_mean"]
