"""The CPU step arena (providers/cpu/step_arena.py, ext/step_arena.pyx): the plan never lets
two live blocks share a byte, a replayed step serves its allocations from the arena without
ever overlapping a live array, and results are bitwise those of the step without it."""
import threading
import weakref

import numpy as np
import pytest

import minitrain
from minitrain import nn, optim
from minitrain._ext.step_arena import StepArena
from minitrain.binding import BoundNode
from minitrain.memory_plan import check_disjoint
from minitrain.providers.cpu.step_arena import MAX_TRACES, StepArenas, plan_arena
from minitrain.training import TrainingSession


def in_arena(array, arena):
    lo, hi = arena.address_range()
    return lo <= array.__array_interface__["data"][0] < hi


# ------------------------------------------------------------------------------ the plan
@pytest.mark.parametrize("seed", range(10))
def test_plan_lists_every_block_sharing_bytes_and_none_is_live_together(seed):
    rng = np.random.default_rng(seed)
    n = 40
    starts = rng.integers(0, 60, n)
    ends = starts + rng.integers(1, 20, n)
    ends[rng.random(n) < 0.2] = -1                  # outlive the step
    sizes = rng.integers(4096, 1 << 16, n)
    plan = plan_arena(sizes, starts, ends)
    check_disjoint(plan.memory)
    assert np.all((plan.offsets < 0) == (ends < 0))
    inner = np.flatnonzero(ends >= 0)
    blocks = dict(zip(inner, plan.memory.blocks))
    for i in inner:
        listed = set(plan.conflict_idx[plan.conflict_ptr[i]:plan.conflict_ptr[i + 1]].tolist())
        sharing = {j for j in inner if j != i and blocks[i].overlaps_in_space(blocks[j])}
        assert listed == sharing
        assert not any(blocks[i].overlaps_in_time(blocks[j]) for j in sharing)
    for i in np.flatnonzero(ends < 0):
        assert plan.conflict_ptr[i] == plan.conflict_ptr[i + 1]


# ------------------------------------------------------------------------------ the allocator
def little_step(keep=None):
    """Allocations of fixed sizes in a fixed order; returns the result and what it computed."""
    a = np.full(3000, 2.0)
    b = a * 3
    del a
    c = np.zeros(2000)
    d = b[:2000] + c + 1
    if keep is not None:
        keep.append(d)
    del b, c
    small = np.ones(4)                  # below MIN_ARENA_BYTES: malloc
    return d.sum() + small.sum(), d * 1


def run_in(arena, mode, keep=None):
    getattr(arena, mode)()
    previous = arena.activate()
    try:
        return little_step(keep)
    finally:
        arena.restore(previous)
        arena.stop()


def traced_arena():
    arena = StepArena(4096)
    run_in(arena, "trace")
    plan = plan_arena(*arena.traced_blocks())
    arena.load(plan.sizes, plan.offsets, plan.conflict_ptr, plan.conflict_idx, plan.memory.arena_bytes)
    return arena, plan


def test_replay_serves_the_traced_blocks_and_the_result_from_malloc():
    arena, plan = traced_arena()
    assert len(plan.sizes) == 6 and list(plan.offsets < 0) == [False] * 5 + [True]
    expected = little_step()
    total, result = run_in(arena, "replay")
    assert total == expected[0] and np.array_equal(result, expected[1])
    assert arena.served == 5 and arena.fallbacks == 0 and not arena.diverged
    assert not in_arena(result, arena) and arena.live_blocks() == []


def test_a_block_kept_alive_is_never_handed_out_again():
    arena, _ = traced_arena()
    kept = []
    run_in(arena, "replay", kept)
    assert in_arena(kept[0], arena) and len(arena.live_blocks()) == 1
    snapshot = kept[0].copy()
    _, result = run_in(arena, "replay", kept)
    np.testing.assert_array_equal(kept[0], snapshot)       # not overwritten by the second run
    assert arena.fallbacks >= 1
    starts = [k.__array_interface__["data"][0] for k in kept]
    assert starts[0] != starts[1]
    kept.clear()
    assert arena.live_blocks() == []


def test_other_sizes_make_the_run_diverge_to_malloc():
    arena, _ = traced_arena()
    arena.replay()
    previous = arena.activate()
    try:
        odd = np.ones(5000)
        other = np.ones(3000)
    finally:
        arena.restore(previous)
        arena.stop()
    assert arena.diverged and not in_arena(odd, arena) and not in_arena(other, arena)


def test_arrays_outlive_the_arena_object():
    arena, _ = traced_arena()
    kept = []
    run_in(arena, "replay", kept)
    values = kept[0].copy()
    del arena
    np.testing.assert_array_equal(kept[0], values)
    kept.clear()                # frees into the arena, which then goes


def test_calloc_blocks_are_zeroed_and_realloc_moves_out():
    arena = StepArena(4096)
    arena.trace()
    previous = arena.activate()
    try:
        a = np.full(1000, 7.0)
        del a
        z = np.zeros(1000)
        del z
    finally:
        arena.restore(previous)
        arena.stop()
    plan = plan_arena(*arena.traced_blocks())
    arena.load(plan.sizes, plan.offsets, plan.conflict_ptr, plan.conflict_idx, plan.memory.arena_bytes)
    arena.replay()
    previous = arena.activate()
    try:
        a = np.full(1000, 7.0)
        del a
        z = np.zeros(1000)              # same block as a, which held sevens
    finally:
        arena.restore(previous)
        arena.stop()
    assert in_arena(z, arena) and not z.any()
    z.resize(5000, refcheck=False)      # realloc: out of the arena, contents kept
    assert not in_arena(z, arena) and not z[:1000].any() and arena.live_blocks() == []


# ------------------------------------------------------------------------------ sessions
def lenet_like(capture, fuse=False):
    minitrain.random.seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Relu(), nn.MaxPool2d(2), nn.Conv2d(4, 8, 3),
                          nn.Relu(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(72, 10))
    return model, TrainingSession(model, nn.CrossEntropyLoss(), optim.Adam(1e-2), input_shape=(1, 16, 16),
                                  capture=capture, fuse=fuse)


@pytest.mark.parametrize("fuse", [False, True])
def test_steps_with_the_arena_give_the_same_bits(fuse, rng):
    x = rng.standard_normal((16, 1, 16, 16)).astype(np.float32)
    y = rng.integers(0, 10, 16)
    runs = []
    for capture in (False, True):
        model, session = lenet_like(capture, fuse)
        losses = [session.train_step(x[i % 2 * 8:][:8], y[i % 2 * 8:][:8]) for i in range(12)]
        losses.append(session.train_step(x[:5], y[:5]))      # another batch size: another signature
        session.pull()
        runs.append((losses, {k: np.array(v) for k, v in model.named_parameters()}, session))
    assert runs[0][0] == runs[1][0]
    for name in runs[0][1]:
        np.testing.assert_array_equal(runs[1][1][name], runs[0][1][name], err_msg=name)
    arenas = runs[1][2]._train.graphs
    assert arenas.stats["replays"] == 10 and arenas.stats["traces"] == 1 and "diverged" not in arenas.stats
    (key, (arena_bytes, total)), = [(k, v) for k, v in arenas.memory().items() if k == (("N", 8),)]
    assert 0 < arena_bytes < total
    assert runs[0][2]._train.graphs is None


def test_no_two_live_tensors_of_a_replayed_step_overlap(monkeypatch, rng):
    """After every node of replayed steps, the buffers of all live node outputs are disjoint."""
    model, session = lenet_like(True)
    x = rng.standard_normal((8, 1, 16, 16)).astype(np.float32)
    y = rng.integers(0, 10, 8)
    for _ in range(3):
        session.train_step(x, y)
    outputs = []
    checked = []
    real_run = BoundNode.run

    def owner(a):
        while isinstance(a.base, np.ndarray):
            a = a.base
        return a

    def run_and_check(self, provider, inputs, output_shapes=None):
        results = real_run(self, provider, inputs, output_shapes)
        outputs.extend(weakref.ref(owner(r)) for r in results if isinstance(r, np.ndarray))
        live = {id(a): a for a in (ref() for ref in outputs) if a is not None and a.nbytes}
        spans = sorted((a.__array_interface__["data"][0], a.nbytes) for a in live.values())
        for (s0, n0), (s1, _) in zip(spans, spans[1:]):
            assert s0 + n0 <= s1, f"{self.op_type} {self.name}: live buffers overlap"
        checked.append(len(spans))
        return results
    monkeypatch.setattr(BoundNode, "run", run_and_check)
    arena_before = session._train.graphs.stats["replays"]
    for _ in range(2):
        session.train_step(x, y)
    assert session._train.graphs.stats["replays"] == arena_before + 2
    sig, = session._train.graphs.signatures.values()
    assert sig.arena.served > 0 and max(checked) > 3


class ChangingExecutor:
    """Stands in for an Executor whose step allocates other sizes on every run."""

    class plan:
        class graph:
            name = "changing"

    def __init__(self):
        self.calls = 0

    def place_inputs(self, fed):
        return fed

    def execute(self, inputs, dims, dims_key):
        self.calls += 1
        a = np.ones(1000 + self.calls)
        b = a * 2
        del a
        return {"y": b.sum()}


def test_a_step_whose_allocations_change_turns_its_arena_off():
    executor = ChangingExecutor()
    arenas = StepArenas(executor)
    results = [arenas.run({}, {}, ())["y"] for _ in range(2 + 2 * MAX_TRACES + 2)]
    assert results == [2.0 * (1001 + i) for i in range(len(results))]
    sig, = arenas.signatures.values()
    assert sig.off and arenas.stats["traces"] == MAX_TRACES and arenas.stats["diverged"] == MAX_TRACES


def test_signatures_are_bounded(monkeypatch):
    monkeypatch.setattr(StepArenas, "max_signatures", 2)
    arenas = StepArenas(ChangingExecutor())
    for key in range(4):
        arenas.run({}, {}, (key,))
    assert list(arenas.signatures) == [(2,), (3,)]


def test_two_threads_on_one_session_match_serial_runs(rng):
    """Concurrent runs of one plan: one takes the arena, the other runs without it."""
    _, session = lenet_like(True)
    x = rng.standard_normal((8, 1, 16, 16)).astype(np.float32)
    for _ in range(3):
        session.eval_step(x)
    expected = session.eval_step(x)
    results, errors = [], []

    def work():
        try:
            for _ in range(20):
                results.append(session.eval_step(x))
        except Exception as error:       # noqa: BLE001 - reported by the assert below
            errors.append(error)
    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 40
    for r in results:
        np.testing.assert_array_equal(r, expected)
