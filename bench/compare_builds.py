"""Two builds of minitrain side by side in one process: did a change make a kernel slower?

    python bench/compare_builds.py BASE_TREE NEW_TREE [--threads 2] [--rounds 15]

Each tree is a checkout with its extensions built in place.  Its `minitrain` package is copied
under another name (mt_base, mt_new) into a temporary folder, so both load at once, and the same
kernels, bound once as the Executor runs them, alternate call by call: per kernel and round,
each side's best call over 50 ms, the two sides' order alternating by round.  Reported: the
median per side and the median over rounds of new/base, with its range.  On a machine shared
with other work this separates builds far better than separate benchmark runs (a control of a
tree against itself gives 0.99-1.01).
"""
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np


def arg(name, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def load(tree, alias, folder):
    """The package of `tree` imported as `alias` (its provider table rewritten to the alias)."""
    target = os.path.join(folder, alias)
    shutil.copytree(os.path.join(tree, "minitrain"), target, ignore=shutil.ignore_patterns("__pycache__"))
    providers = os.path.join(target, "providers", "__init__.py")
    with open(providers) as f:
        text = f.read()
    with open(providers, "w") as f:
        f.write(text.replace('"minitrain.providers.', f'"{alias}.providers.'))
    return importlib.import_module(alias)


def kernels(mt):
    """name -> a call of one bound node (or a small plan), inputs made from a fixed seed."""
    bind_node = importlib.import_module(mt.__name__ + ".executor").bind_node
    tensor_type = importlib.import_module(mt.__name__ + ".ops.schema").TensorType
    cpu = importlib.import_module(mt.__name__ + ".providers").get_provider("cpu")
    schedule = importlib.import_module(mt.__name__ + ".scheduler").schedule
    rng = np.random.default_rng(0)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def bound(op, arrays, attrs, domain="", opset=None, shapes=None):
        node, _ = bind_node(op, [tensor_type(a.dtype, a.shape) for a in arrays], attrs, domain=domain,
                            opset=opset or (17 if not domain else 1), provider=cpu)
        return lambda: node.run(cpu, arrays, shapes)
    x, w, dy, pooled, big = f32(64, 6, 14, 14), f32(16, 6, 5, 5), f32(64, 16, 10, 10), f32(64, 6, 28, 28), \
        f32(32, 64, 32, 32)
    indices = mt.run_node("MaxPool", [pooled], attrs={"kernel_shape": [2, 2], "strides": [2, 2]},
                          outputs=["Y", "Indices"])[1]
    calls = {
        "Conv LeNet conv2 fwd (N64 6x14x14->16 k5)": bound("Conv", [x, w], {}),
        "ConvGrad LeNet conv2": bound("ConvGrad", [dy, x, w], {}, domain="com.microsoft"),
        "Conv 3x3 (N8 64x28x28->64)": bound("Conv", [f32(8, 64, 28, 28), f32(64, 64, 3, 3)], {"pads": [1] * 4}),
        "ConvTranspose k4 s2 (N8 32x16x16->16)": bound("ConvTranspose", [f32(8, 32, 16, 16), f32(32, 16, 4, 4)],
                                                        {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
        "Conv depthwise 3x3 (N32 64x32x32 g64)": bound("Conv", [big, f32(64, 1, 3, 3)], {"pads": [1] * 4, "group": 64}),
        "ConvGrad depthwise 3x3 (N32 64x32x32 g64)": bound("ConvGrad", [big, big, f32(64, 1, 3, 3)],
                                                           {"pads": [1] * 4, "group": 64}, domain="com.microsoft"),
        "MaxPool k2 (N64 6x28x28)": bound("MaxPool", [pooled], {"kernel_shape": [2, 2], "strides": [2, 2]}),
        "MaxPoolGrad k2 (N64 6x28x28)": bound("MaxPoolGrad", [f32(64, 6, 14, 14), indices],
                                             {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=9,
                                             shapes={"dX": pooled.shape}),
        "AveragePool 3x3 s1 p1 (N32 64x32x32)": bound("AveragePool", [big], {"kernel_shape": [3, 3], "pads": [1] * 4}),
        "AveragePool 3x3 s2, rows (N32 64x32x32)": bound("AveragePool", [big], {"kernel_shape": [3, 3],
                                                                                 "strides": [2, 2]}),
        "AveragePoolGrad 3x3 s2 (N32 64x32x32)": bound("AveragePoolGrad", [f32(32, 64, 15, 15)],
                                                      {"kernel_shape": [3, 3], "strides": [2, 2]}, opset=9,
                                                      shapes={"dX": big.shape}),
        "ReluGrad 1024x1024": bound("ReluGrad", [f32(1024, 1024), f32(1024, 1024)], {}, domain="com.microsoft"),
        "SoftmaxGrad 256x1000": bound("SoftmaxGrad_13", [f32(256, 1000), f32(256, 1000)], {"axis": -1},
                                      domain="com.microsoft"),
    }
    g = mt.Graph()
    g.add_input("x", np.float32, ("N", 1, 28, 28))
    g.add_initializer("w", f32(6, 1, 5, 5))
    y = g.add_node("Relu", [g.add_node("Conv", ["x", "w"], attrs={"pads": [2, 2, 2, 2]})])
    g.outputs.append(g.add_node("MaxPool", [y], attrs={"kernel_shape": [2, 2], "strides": [2, 2]}))
    executor, batch = mt.Executor(schedule(g)), f32(64, 1, 28, 28)
    calls["Executor.run Conv-Relu-MaxPool (N64 1x28x28)"] = lambda: executor.run({"x": batch})
    return calls


def best_call(fn, seconds=0.05):
    best, end = float("inf"), time.perf_counter() + seconds
    while True:
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
        if start > end:
            return best


def main():
    base_tree, new_tree = sys.argv[1], sys.argv[2]
    threads, rounds = arg("--threads", 2), arg("--rounds", 15)
    folder = tempfile.mkdtemp(prefix="minitrain_ab_")
    sys.path.insert(0, folder)
    sides = {}
    for name, tree in (("base", base_tree), ("new", new_tree)):
        mt = load(os.path.abspath(tree), f"mt_{name}", folder)
        mt.set_num_threads(threads)
        sides[name] = kernels(mt)
    print(f"base {base_tree}, new {new_tree}: {threads} threads, {rounds} rounds\n")
    print("| kernel | base us | new us | new/base (range) |\n|---|---|---|---|")
    for kernel in sides["base"]:
        fns = sides["base"][kernel], sides["new"][kernel]
        for fn in fns:
            fn()
        times = {0: [], 1: []}
        for r in range(rounds):
            for side in ((0, 1) if r % 2 == 0 else (1, 0)):
                times[side].append(best_call(fns[side]))
        ratios = sorted(n / b for b, n in zip(times[0], times[1]))
        print(f"| {kernel} | {statistics.median(times[0]) * 1e6:.1f} | {statistics.median(times[1]) * 1e6:.1f} | "
              f"{statistics.median(ratios):.3f} ({ratios[0]:.2f}-{ratios[-1]:.2f}) |", flush=True)
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
