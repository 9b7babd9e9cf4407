"""Kernels called from several Python threads at once give the serial results, and the
process-wide BLAS thread setting is never changed under a running call."""
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import minitrain
from minitrain import Executor, Graph, run_node
from minitrain.providers.cpu import blas
from minitrain.scheduler import schedule

MS = "com.microsoft"


class FakeBlasThreads:
    """Stands in for OpenBLAS's setting, recording who entered and left."""

    def __init__(self):
        self.count, self.events = 2, []

    def use(self, n):
        old, self.count = self.count, n
        self.events.append(("set", n))
        return old

    def restore(self, old):
        self.events.append(("restore", old))
        self.count = old


def test_blas_thread_setting_is_held_for_the_whole_call(monkeypatch):
    fake = FakeBlasThreads()
    monkeypatch.setattr(blas, "BLAS_THREADS", fake)
    inside = threading.Event()

    def first():
        with blas.blas_threads(1):
            inside.set()
            time.sleep(0.2)
            fake.events.append(("first sees", fake.count))

    def second():
        inside.wait()
        with blas.blas_threads(3):
            fake.events.append(("second sees", fake.count))
    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fake.events == [("set", 1), ("first sees", 1), ("restore", 2), ("set", 3), ("second sees", 3),
                           ("restore", 2)]
    assert fake.count == 2


def _jobs(rng):
    """Calls that take the BLAS route (a batch of 1 on 2 threads goes to GEMM), threaded BLAS,
    the direct kernels, and the OpenMP elementwise, pooling and normalisation kernels."""
    x, w = rng.standard_normal((1, 8, 20, 20)), rng.standard_normal((16, 8, 3, 3))
    xb = rng.standard_normal((4, 8, 20, 20))
    a, b = rng.standard_normal((300, 256)), rng.standard_normal((256, 300))
    big = rng.standard_normal((64, 4, 40, 40)).astype(np.float32)
    return [
        lambda: run_node("Conv", [x, w], attrs={"pads": [1, 1, 1, 1]}),
        lambda: run_node("Conv", [xb, w], attrs={"strides": [2, 2]}),
        lambda: run_node("ConvGrad", [np.ones((1, 16, 18, 18)), x, w], domain=MS),
        lambda: run_node("Gemm", [a, b]),
        lambda: run_node("Relu", [big]),
        lambda: run_node("MaxPool", [big], attrs={"kernel_shape": [2, 2], "strides": [2, 2]}),
        lambda: run_node("BatchNormalization", [big] + [np.ones(4, np.float32)] * 4, attrs={"training_mode": 1}),
        lambda: run_node("Softmax", [big.reshape(64, -1)]),
    ]


def _same(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)


def test_concurrent_run_node_matches_serial(rng, threads):
    jobs = _jobs(rng)
    serial = [job() for job in jobs]
    order = [i for _ in range(3) for i in range(len(jobs))]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: (i, jobs[i]()), order))
    for i, got in results:
        _same(got, serial[i])


def _graph(rng):
    g = Graph()
    g.add_input("x", np.float64, ("N", 3, 12, 12))
    g.add_initializer("w", rng.standard_normal((8, 3, 3, 3)))
    g.add_initializer("fc", rng.standard_normal((10, 8 * 6 * 6)))
    y = g.add_node("Conv", ["x", "w"], attrs={"pads": [1, 1, 1, 1]})
    y = g.add_node("Relu", [y])
    y = g.add_node("MaxPool", [y], attrs={"kernel_shape": [2, 2], "strides": [2, 2]})
    y = g.add_node("Flatten", [y])
    g.outputs.append(g.add_node("Gemm", [y, "fc"], attrs={"transB": 1}))
    return g


def test_concurrent_executor_runs_match_serial(rng, threads):
    plan = schedule(_graph(rng))
    inputs = [rng.standard_normal((n, 3, 12, 12)) for n in (1, 2, 5, 1, 3, 2)]
    serial = [Executor(plan).run({"x": x}) for x in inputs]
    shared = Executor(plan)

    def run(i):
        own = Executor(plan).run({"x": inputs[i]})
        return i, own, shared.run({"x": inputs[i]})
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, list(range(len(inputs))) * 2))
    for i, own, from_shared in results:
        for name in serial[i]:
            np.testing.assert_array_equal(own[name], serial[i][name])
            np.testing.assert_array_equal(from_shared[name], serial[i][name])


def _shape_jobs(rng):
    """Calls over several shapes each, so that a small cache limit evicts plans while other
    threads read them: direct and strided convolution gradients, ConvTranspose, the pooling
    kernels that build tables (rows, flat, separable, k = s = 2) and SoftmaxGrad."""
    jobs = []
    for size in (7, 9, 12):
        x = rng.standard_normal((3, 4, size, size))
        w = rng.standard_normal((6, 4, 3, 3))
        y = run_node("Conv", [x, w], attrs={"strides": [2, 2]})[0]
        pool = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
        jobs += [      # default arguments bind this size's arrays
            lambda x=x, w=w: run_node("Conv", [x, w], attrs={"pads": [1, 1, 1, 1]}),
            lambda x=x, w=w, y=y: run_node("ConvGrad", [np.ones_like(y), x, w], attrs={"strides": [2, 2]}, domain=MS),
            lambda x=x, w=w: run_node("ConvTranspose", [x, w.transpose(1, 0, 2, 3).copy()],
                                      attrs={"strides": [2, 2], "output_padding": [1, 1]}),
            lambda x=x, pool=pool: run_node("AveragePool", [x], attrs=pool),
            lambda x=x: run_node("AveragePool", [x], attrs={"kernel_shape": [3, 2], "strides": [1, 2]}),
            lambda x=x, size=size, pool=pool: run_node("AveragePoolGrad", [np.ones((3, 4, size, size))], attrs=pool,
                                 output_shapes={"dX": x.shape}),
            lambda x=x, size=size: run_node("AveragePoolGrad", [np.ones((3, 4, (size - 3) // 2 + 1, (size - 3) // 2 + 1))],
                                 attrs={"kernel_shape": [3, 3], "strides": [2, 2], "dilations": [1, 1]},
                                 output_shapes={"dX": x.shape}),
            lambda x=x: run_node("MaxPool", [x], attrs={"kernel_shape": [2, 2], "strides": [2, 2]}, outputs=["Y", "Indices"]),
            lambda x=x, size=size: run_node("SoftmaxGrad_13", [np.ones((size, 33)), x.reshape(-1)[:size * 33].reshape(size, 33)],
                                 attrs={"axis": -1}, domain=MS),
        ]
    return jobs


def test_concurrent_calls_match_serial_while_caches_evict(rng, threads):
    jobs = _shape_jobs(rng)
    old = minitrain.cache_limit()
    try:
        minitrain.set_cache_limit(2)
        serial = [job() for job in jobs]
        order = [i for _ in range(3) for i in rng.permutation(len(jobs))]
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda i: (i, jobs[i]()), order))
    finally:
        minitrain.set_cache_limit(old)
    for i, got in results:
        _same(got, serial[i])


def test_set_num_threads_from_another_thread_mid_run(rng):
    """A kernel reads the thread count once per call (its scratch is sized by it): flipping it
    between 1 and 2 while other threads run kernels gives, call by call, the serial result of
    one count or the other."""
    x, w = rng.standard_normal((4, 8, 14, 14)), rng.standard_normal((16, 8, 3, 3))
    y = run_node("Conv", [x, w], attrs={"strides": [2, 2]})[0]
    jobs = [
        lambda: run_node("Conv", [x, w], attrs={"pads": [1, 1, 1, 1]}),
        lambda: run_node("ConvGrad", [np.ones_like(y), x, w], attrs={"strides": [2, 2]}, domain=MS),
        lambda: run_node("AveragePoolGrad", [np.ones((4, 8, 6, 6))], attrs={"kernel_shape": [3, 3], "strides": [2, 2]},
                         output_shapes={"dX": x.shape}),
        lambda: run_node("MaxPool", [x], attrs={"kernel_shape": [2, 2], "strides": [2, 2]}, outputs=["Y", "Indices"]),
        lambda: run_node("SoftmaxGrad_13", [x.reshape(-1, 196), x.reshape(-1, 196)], attrs={"axis": -1}, domain=MS),
    ]
    old = minitrain.get_num_threads()
    try:
        expected = {}
        for n in (1, 2):
            minitrain.set_num_threads(n)
            expected[n] = [job() for job in jobs]
        stop = threading.Event()

        def flip():
            n = 1
            while not stop.is_set():
                minitrain.set_num_threads(n)
                n = 3 - n
                time.sleep(0.0005)
        flipper = threading.Thread(target=flip)
        flipper.start()
        try:
            with ThreadPoolExecutor(3) as pool:
                results = list(pool.map(lambda i: (i, jobs[i]()), [i for _ in range(6) for i in range(len(jobs))]))
        finally:
            stop.set()
            flipper.join()
    finally:
        minitrain.set_num_threads(old)
    for i, got in results:
        assert any(all(np.array_equal(g, e) for g, e in zip(got, expected[n][i])) for n in (1, 2)), i
