"""Pooling's shape rule, (N, C, D1[, D2[, D3]]), is checked once, by inference (ops/pool.py):
run_node and a graph both fail there, before a kernel runs, on every provider; the kernels
trust it."""
import numpy as np
import pytest

from minitrain import run_node
from minitrain.errors import ShapeError
from minitrain.graph import Graph
from minitrain.scheduler import schedule

PROVIDERS = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
MS = "com.microsoft"
POOL = {"kernel_shape": [2]}
BAD_SHAPES = [(4, 6), (1, 1, 2, 2, 2, 2)]


def _cases(x):
    dy = np.zeros(x.shape, x.dtype)
    return [
        ("", "MaxPool", [x], POOL), ("", "AveragePool", [x], POOL),
        ("", "GlobalMaxPool", [x], {}), ("", "GlobalAveragePool", [x], {}),
        ("", "MaxPoolGrad", [dy, np.zeros(x.shape, np.int64)], POOL), ("", "AveragePoolGrad", [dy], POOL),
        (MS, "GlobalMaxPoolGrad", [dy, x], {}),
    ]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("shape", BAD_SHAPES)
def test_run_node_rejects_a_pooling_input_of_the_wrong_rank(provider, shape):
    for domain, op, inputs, attrs in _cases(np.zeros(shape, np.float32)):
        with pytest.raises(ShapeError, match=r"pooling needs \(N, C, D1\[, D2\[, D3\]\]\)"):
            run_node(op, inputs, attrs=attrs, domain=domain, provider=provider)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("op, attrs", [("MaxPool", POOL), ("AveragePool", POOL), ("GlobalAveragePool", {})])
def test_a_graph_rejects_a_pooling_input_of_the_wrong_rank(provider, op, attrs):
    g = Graph(name="pool")
    g.add_input("x", np.float32, (4, 6))
    g.outputs.append(g.add_node(op, ["x"], ["y"], attrs))
    with pytest.raises(ShapeError, match=r"pooling needs \(N, C, D1\[, D2\[, D3\]\]\)"):
        schedule(g, providers=provider)
