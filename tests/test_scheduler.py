"""The scheduler: lifetimes from the plan, buffers freed at last use, and the planned peak."""
import numpy as np

from minitrain import Executor
from minitrain.autodiff import build_gradient_graph
from minitrain.scheduler import schedule

from test_autodiff import mlp_graph


def test_every_activation_is_freed_right_after_its_last_consumer(rng):
    g, _ = mlp_graph(rng, sizes=(32, 64, 64, 10))
    full, grads = build_gradient_graph(g, "loss", ["w0", "b0", "w1", "b1", "w2", "b2"])
    plan = schedule(full)
    checked = 0
    for step in plan.steps:
        for name in step.node.outputs:
            if not name or name in plan.fetch:
                continue
            readers = [s.index for s in plan.steps if name in s.node.inputs]
            expected = max(readers) if readers else step.index
            assert plan.free_step(name) == expected, name
            checked += 1
    assert checked > 10
    for name in full.initializers:
        assert plan.free_step(name) is None


def test_planned_peak_is_below_the_sum_of_all_tensors(rng):
    g, _ = mlp_graph(rng, sizes=(256, 512, 512, 512, 10))
    full, grads = build_gradient_graph(g, "loss", [n for n in g.initializers])
    plan = schedule(full)
    dims = {"N": 128}
    peak, total = plan.peak_bytes(dims), plan.total_bytes(dims)
    assert 0 < peak < 0.6 * total, (peak, total)


def test_executor_drops_values_and_profiles(rng):
    g, feeds = mlp_graph(rng)
    full, grads = build_gradient_graph(g, "loss", ["w0"])
    executor = Executor(schedule(full), profile=True)
    out = executor.run(feeds)
    assert set(out) == set(full.outputs)
    assert len(executor.profile) == len(executor.plan.steps)
    assert all(t >= 0 for t in executor.profile.values())


def test_plan_prunes_nodes_not_needed(rng):
    g, feeds = mlp_graph(rng)
    full, grads = build_gradient_graph(g, "loss", ["w0", "w1"])
    only_w1 = schedule(full, [grads["w1"]])
    both = schedule(full, [grads["w0"], grads["w1"]])
    assert len(only_w1.steps) < len(both.steps)
    np.testing.assert_allclose(Executor(only_w1).run(feeds)[grads["w1"]],
                               Executor(both).run(feeds)[grads["w1"]])


def test_new_batch_size_reuses_the_plan(rng):
    g, feeds = mlp_graph(rng, batch=6)
    plan = schedule(g)
    executor = Executor(plan)
    a = executor.run(feeds)["loss"]
    b = executor.run({"x": feeds["x"][:3], "labels": feeds["labels"][:3]})["loss"]
    assert np.isfinite(a) and np.isfinite(b)
