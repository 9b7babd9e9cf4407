"""Data parallelism in a TrainingSession (`data_parallel=True`): what the session adds to its
graphs and does at start, so that every rank applies the update of the global batch.

- The gradient graph gets the all-reduce of the averaged gradients: by default one collective
  over one fused flat buffer per step, as ONNX Runtime's NcclAllReduce; with `buckets` > 1 in
  buckets as PyTorch DDP makes them: the gradients, in the order the backward pass produces
  them, are split into `buckets` groups of about equal size; each group is copied into one flat buffer, scaled by
  1 / world size on the way, and summed there over the ranks (StartAllReduce and
  WaitAllReduce: MPI on the CPU, NCCL on CUDA), then read back as views (SliceFlat).  The
  scheduler starts a bucket's all-reduce right after its last gradient and waits for it only
  before the update, so on CUDA, where the copies and the all-reduce run on a second stream,
  the rest of the backward pass hides them (the last bucket's stay exposed).  The optimizer
  update reads the views, so gradient-norm clipping, and the update of gradients accumulated
  over micro-batches, see the mean gradient over ranks: the gradient of a mean loss over the
  global batch, as one process would compute it (a loss with reduction "sum" is summed over
  the ranks instead, scale 1, for the same reason).
- At start, rank 0's parameters, optimizer state and BatchNorm statistics are broadcast to every
  rank; each rank's Dropout draws another stream (seed + rank).
- The ranks must train the same thing: a digest of the session (parameters, input and target
  specs, providers, optimizer) is compared at start, and the batch shapes at the first step;
  a difference raises WorldMismatchError on every rank, naming it.
"""
from __future__ import annotations

import math

import numpy as np

from .. import random as mt_random
from ..distributed.collectives import allgather_object, allreduce_mean, broadcast_array, broadcast_object
from ..distributed.world import world
from ..errors import DistributedUnavailableError, WorldMismatchError
from ..inference import topological_order
from ..ops.schema import MINITRAIN_DOMAIN

DEFAULT_BUCKETS = 1


def require_world():
    """The current World; DistributedUnavailableError saying what to call without one."""
    current = world()
    if current is None:
        raise DistributedUnavailableError(
            "TrainingSession(data_parallel=True) needs the MPI world: call minitrain.distributed.init() first, "
            "in every process launched by mpiexec -n N")
    return current


def check_bucket_count(buckets):
    """`buckets` (None: DEFAULT_BUCKETS) as an int >= 1; ValueError naming it otherwise."""
    if buckets is None:
        return DEFAULT_BUCKETS
    if isinstance(buckets, bool) or not isinstance(buckets, (int, np.integer)) or buckets < 1:
        raise ValueError(f"TrainingSession: gradient_buckets must be an int >= 1, got {buckets!r}")
    return int(buckets)


def all_reduce_gradients(graph, grads, shapes, scale, buckets=DEFAULT_BUCKETS):
    """Append the bucketed all-reduce of `grads` (parameter -> gradient value name) to `graph`
    (see the module docstring); `shapes` maps each parameter to its shape.  Returns parameter
    -> the name of `scale` times its gradient summed over the ranks (1 / world size: the mean)."""
    graph.opset_imports.setdefault(MINITRAIN_DOMAIN, 1)
    averaged = {}
    for k, bucket in enumerate(gradient_buckets(graph, grads, shapes, buckets)):
        name = f"data_parallel.bucket{k}"
        pending = graph.add_node("StartAllReduce", [grads[p] for p in bucket], [f"{name}.pending"],
                                 {"scale": scale}, MINITRAIN_DOMAIN, name=f"{name}.start_all_reduce")
        summed = graph.add_node("WaitAllReduce", [pending], [f"{name}.gradients_summed"], {}, MINITRAIN_DOMAIN,
                                name=f"{name}.wait_all_reduce")
        offset = 0
        for param in bucket:
            shape = [int(d) for d in shapes[param]]
            averaged[param] = graph.add_node("SliceFlat", [summed], [f"data_parallel.gradient.{param}"],
                                             {"offset": offset, "shape": shape}, MINITRAIN_DOMAIN,
                                             name=f"data_parallel.view.{param}")
            offset += math.prod(shape)
    return {param: averaged[param] for param in grads}


def gradient_buckets(graph, grads, shapes, count):
    """The parameters of `grads` in at most `count` lists of about equal total size, in the order
    `graph` computes their gradients (gradients that graph inputs or initializers hold first):
    each list closes once it holds its share of the elements that remain, and never between
    two gradients of one node."""
    produced = {name: i for i, node in enumerate(topological_order(graph)) for name in node.outputs if name}
    position = {param: produced.get(grads[param], -1) for param in grads}
    order = sorted(grads, key=position.get)
    sizes = {param: math.prod(int(d) for d in shapes[param]) for param in order}
    remaining = sum(sizes.values())
    buckets, current, filled = [], [], 0
    for param, following in zip(order, order[1:] + [None]):
        current.append(param)
        filled += sizes[param]
        left = count - len(buckets)
        same_node = following is not None and position[following] == position[param] >= 0
        if left > 1 and filled * left >= remaining and not same_node:
            buckets.append(current)
            remaining -= filled
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets


def vary_dropout_seeds(graph, rank):
    """Give each rank its own Dropout masks: a node's `seed` attribute becomes seed + rank, and
    minitrain's global generator (the masks of nodes without one) is reseeded with rank 0's
    draw + rank."""
    for node in graph.nodes:
        if node.op_type == "Dropout" and node.attrs.get("seed") is not None:
            node.attrs["seed"] = int(node.attrs["seed"]) + rank
    base = broadcast_object(int(mt_random.generator().integers(0, 2 ** 62)) if rank == 0 else None)
    mt_random.seed(base + rank)


def broadcast_state(session):
    """Copy rank 0's parameters, BatchNorm statistics, optimizer state and count of updates
    (pulled from its device) into every rank's, on the host and then on the device."""
    session.pull()
    for array in _state_arrays(session):
        np.copyto(array, broadcast_array(array))        # a no-op where broadcast_array wrote in place
    session.optimizer.step_count = broadcast_object(session.optimizer.step_count)
    session.push()


def _state_arrays(session):
    arrays = [p.data for _, p in session.model.named_state()]
    arrays += [session.optimizer.state[s][n] for s in sorted(session.optimizer.state)
               for n in session.optimizer.state[s]]
    return arrays


def average_batchnorm_statistics(session, names):
    """Replace the BatchNorm running statistics `names` (state tensor names) on every rank by
    their mean over the ranks."""
    session.state.pull(names)
    for name in names:
        host = session.state.host(name)
        np.copyto(host, allreduce_mean(host).astype(host.dtype, copy=False))
    session.state.push(names)


def describe(session):
    """What the ranks of one run must agree on, as plain values (compared across ranks)."""
    optimizer = session.optimizer
    return {
        "parameters": [(name, tuple(array.shape), str(array.dtype)) for name, array in session.params.items()],
        "trained parameters": sorted(session.trained),
        "input": (str(session.input_spec[0]), session.input_spec[1]),
        "target": (str(session.target_spec[0]), session.target_spec[1]),
        "providers": session.providers,
        "optimizer": (type(optimizer).__name__, sorted(optimizer.attrs().items())),
        "gradient buckets": session.gradient_buckets,
    }


def check_world_agrees(facts, what="the session"):
    """Raise WorldMismatchError on every rank unless every rank's `facts` (a dict) equal rank 0's;
    the message names each differing entry with rank 0's value and the other's."""
    everyone = allgather_object(facts)
    differences = []
    for rank, theirs in enumerate(everyone[1:], start=1):
        for key, value in everyone[0].items():
            if theirs.get(key) != value:
                differences.append(_difference(key, value, theirs.get(key), rank))
    if differences:
        raise WorldMismatchError(f"data-parallel ranks disagree on {what}: " + "; ".join(differences))


def _difference(key, ours, theirs, rank):
    """One line naming how rank `rank`'s entry `key` differs from rank 0's (for lists: the first
    element that differs)."""
    if isinstance(ours, list) and isinstance(theirs, list):
        index = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
        ours = ours[index] if index < len(ours) else "nothing more"
        theirs = theirs[index] if index < len(theirs) else "nothing more"
        key = f"{key} #{index}"
    return f"{key}: rank 0 has {_short(ours)}, rank {rank} has {_short(theirs)}"


def _short(value, limit=300):
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def batch_facts(inputs, targets):
    """The batch shapes the ranks must agree on at the first step."""
    return {"input batch shape": tuple(np.shape(inputs)), "target batch shape": tuple(np.shape(targets))}
