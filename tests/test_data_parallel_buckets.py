"""The gradient buckets of data parallelism (training/data_parallel.py), in one process: how the
gradients split, in the order the backward pass produces them, and where the plan puts each
bucket's all-reduce: started right after its last gradient, waited for only before the update,
so the backward pass after it overlaps it.  The numbers on 2 ranks: test_distributed_training.py."""
import math

import numpy as np
import pytest

from minitrain import nn
from minitrain.optim import SGD
from minitrain.training import TrainingSession
from minitrain.training.data_parallel import all_reduce_gradients, check_bucket_count, gradient_buckets


def lenet():
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.Relu(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.Relu(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.Relu(), nn.Linear(120, 84),
                         nn.Relu(), nn.Linear(84, 10))


@pytest.fixture(scope="module")
def session():
    return TrainingSession(lenet(), nn.CrossEntropyLoss(), SGD(0.1), input_shape=(1, 28, 28))


def sizes(session, bucket):
    return sum(session.params[p].size for p in bucket)


def test_one_bucket_holds_every_gradient_last_layer_first(session):
    buckets = gradient_buckets(session.grad_graph, session.grad_names, _shapes(session), 1)
    assert len(buckets) == 1 and sorted(buckets[0]) == sorted(session.grad_names)
    assert set(buckets[0][:2]) == {"11.weight", "11.bias"}
    assert set(buckets[0][-2:]) == {"0.weight", "0.bias"}


@pytest.mark.parametrize("count, expected", [
    (2, [{"11.weight", "11.bias", "9.weight", "9.bias", "7.weight"},
         {"7.bias", "3.weight", "3.bias", "0.weight", "0.bias"}]),
    (3, [{"11.weight", "11.bias", "9.weight", "9.bias", "7.weight"}, {"7.bias", "3.weight", "3.bias"},
         {"0.weight", "0.bias"}]),
])
def test_buckets_split_by_size_in_backward_order(session, count, expected):
    buckets = gradient_buckets(session.grad_graph, session.grad_names, _shapes(session), count)
    assert [set(b) for b in buckets] == expected
    total = sum(p.size for p in session.params.values())
    assert sizes(session, buckets[0]) * count >= total      # the first closes at its share of the elements


def test_more_buckets_than_gradients_gives_one_per_node(session):
    buckets = gradient_buckets(session.grad_graph, session.grad_names, _shapes(session), 100)
    assert sorted(p for b in buckets for p in b) == sorted(session.grad_names)
    assert all(len(b) <= 2 for b in buckets) and len(buckets) >= 5


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_bucket_count_is_named(bad):
    with pytest.raises(ValueError, match="gradient_buckets"):
        check_bucket_count(bad)
    with pytest.raises(ValueError, match="gradient_buckets"):
        TrainingSession(lenet(), nn.CrossEntropyLoss(), SGD(0.1), input_shape=(1, 28, 28), gradient_buckets=bad)


@pytest.mark.parametrize("count", [1, 2, 3])
def test_plan_starts_each_all_reduce_after_its_last_gradient_and_waits_before_the_update(session, count):
    graph = session.grad_graph.copy()
    averaged = all_reduce_gradients(graph, session.grad_names, _shapes(session), 0.5, count)
    norm = session.optimizer.add_to_graph(graph, averaged)
    plan = session._schedule(graph, [norm])
    steps = [(s.node.op_type, s.node) for s in plan.steps]
    index = {name: i for i, (_, node) in enumerate(steps) for name in node.outputs if name}
    starts = [i for i, (op, _) in enumerate(steps) if op == "StartAllReduce"]
    waits = [i for i, (op, _) in enumerate(steps) if op == "WaitAllReduce"]
    assert len(starts) == len(waits) == count
    backward_end = max(index[g] for g in session.grad_names.values() if g in index)
    for start in starts:
        assert start - 1 == max(index[g] for g in steps[start][1].inputs)     # right after the bucket's last gradient
    assert min(waits) > max(starts) > backward_end
    if count > 1:
        assert starts[0] < backward_end         # the first bucket's all-reduce overlaps the backward pass
    update = next(i for i, (op, _) in enumerate(steps) if op == "SGDOptimizer")
    assert max(waits) < update


def test_averaged_views_read_the_summed_buckets_in_parameter_order(session):
    graph = session.grad_graph.copy()
    averaged = all_reduce_gradients(graph, session.grad_names, _shapes(session), 0.5, 2)
    assert list(averaged) == list(session.grad_names)
    producers = graph.producers()
    for param, name in averaged.items():
        view = producers[name]
        assert view.op_type == "SliceFlat" and list(view.attrs["shape"]) == list(session.params[param].shape)
        assert producers[view.inputs[0]].op_type == "WaitAllReduce"
        start = producers[producers[view.inputs[0]].inputs[0]]
        assert start.op_type == "StartAllReduce" and start.attrs["scale"] == 0.5
        before = _params_of(session, start)
        before = before[:before.index(param)]
        assert view.attrs["offset"] == sum(math.prod(session.params[p].shape) for p in before)


def _params_of(session, start):
    by_grad = {g: p for p, g in session.grad_names.items()}
    return [by_grad[g] for g in start.inputs]


def _shapes(session):
    return {p: np.shape(session.params[p]) for p in session.grad_names}
