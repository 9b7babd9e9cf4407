"""Gradient checking by central finite differences in float64 (Theano's verify_grad idea).

The outputs are projected on random directions R_k, so one scalar L = sum_k <R_k, Y_k> is
differentiated: the analytic gradient comes from the gradient graph (the registered gradient
builder and gradient kernels, seeded with R_k), the numeric one from (L(x+eps) - L(x-eps)) / 2eps
for every element of every checked input.  Use it on a single node (`gradcheck`) or on a whole
graph (`gradcheck_graph`).

An output whose gradient no gradient node reads (SoftmaxCrossEntropyLoss's log_prob, say) has no
gradient: it is left out of L, and a NoGradientWarning names it.
"""
from __future__ import annotations

import warnings

import numpy as np

from .autodiff import build_gradient_graph
from .errors import GradcheckError
from .executor import Executor, newest_opset, run_node
from .graph import Graph
from .ops import get_gradient_builder, get_schema
from .scheduler import schedule


class NoGradientWarning(UserWarning):
    """An output of the checked op has no gradient, so gradcheck leaves it out of the loss."""


def _compare(name, analytic, numeric, rtol, atol):
    if analytic is None:
        analytic = np.zeros_like(numeric)
    analytic = np.asarray(analytic)
    if analytic.shape != numeric.shape:
        raise AssertionError(f"gradcheck {name}: analytic gradient has shape {analytic.shape}, expected {numeric.shape}")
    if not np.allclose(analytic, numeric, rtol=rtol, atol=atol):
        err = np.abs(analytic - numeric)
        where = np.unravel_index(np.argmax(err - rtol * np.abs(numeric)), err.shape)
        raise AssertionError(
            f"gradcheck {name}: analytic and numeric gradients differ; max abs error {err.max():.3g} "
            f"at {tuple(int(i) for i in where)}: analytic {analytic[where]:.6g}, numeric {numeric[where]:.6g}")


def numeric_gradient(loss_of, arrays, index=0, eps=1e-6):
    """Central differences of the scalar loss_of(arrays) with respect to arrays[index]
    (changed in place while it runs, restored after)."""
    x = arrays[index]
    grad = np.zeros_like(x)
    flat, gflat = x.reshape(-1), grad.reshape(-1)
    for k in range(flat.size):
        original = flat[k]
        flat[k] = original + eps
        plus = loss_of(arrays)
        flat[k] = original - eps
        minus = loss_of(arrays)
        flat[k] = original
        gflat[k] = (plus - minus) / (2 * eps)
    return grad


def _as_float64(x):
    x = np.array(x, copy=True)
    return x.astype(np.float64) if np.issubdtype(x.dtype, np.floating) else x


def gradcheck(op_type, inputs, attrs=None, *, domain="", opset=None, wrt=None, eps=1e-6, rtol=1e-4,
              atol=1e-6, seed=0, output_shapes=None, outputs=None, provider="cpu"):
    """Check the gradient of one forward node against finite differences, in float64.

    provider: where the gradient graph runs; on a device the analytic gradients are also
    compared with the CPU kernels' on the same inputs (to 1e-10, both float64), and the
    finite differences are taken on the CPU.

    wrt: indices of the inputs to check (default: every float input the op's gradient builder
    differentiates); outputs: names of the outputs to project (default: every float output).
    Outputs without a gradient are skipped with a NoGradientWarning; a GradcheckError when
    no output left has one, or `wrt` names an input that is absent or not float.
    Raises AssertionError on a mismatch; returns {input index: (analytic, numeric)}.
    """
    opset = newest_opset(op_type, domain) if opset is None else opset
    sch = get_schema(op_type, domain, opset)
    arrays = [None if x is None else _as_float64(x) for x in inputs]
    builder = get_gradient_builder(op_type, domain, opset)
    if builder is None:
        raise GradcheckError(f"gradcheck: {op_type} has no registered gradient at opset {opset}")
    if wrt is None:
        wrt = [i for i, a in enumerate(arrays) if a is not None and a.dtype == np.float64
               and (builder.differentiable is None or i in builder.differentiable)]
    for i in wrt:
        if not 0 <= i < len(arrays) or arrays[i] is None or arrays[i].dtype != np.float64:
            given = "absent" if not 0 <= i < len(arrays) or arrays[i] is None else f"of dtype {arrays[i].dtype}"
            raise GradcheckError(f"gradcheck {op_type}: wrt input #{i} is {given}; a checked input must be a "
                                 f"float array among the {len(arrays)} inputs")

    def forward(arrs):
        return run_node(op_type, arrs, attrs=attrs, domain=domain, opset=opset,
                        outputs=outputs, output_shapes=output_shapes)
    out_names = list(outputs or sch.outputs)
    ys = forward(arrays)
    with_gradient = _outputs_with_gradient(op_type, domain, opset, arrays, attrs, wrt, out_names, ys)
    float_outputs = [k for k, y in enumerate(ys) if y.dtype == np.float64]
    projected = [k for k in float_outputs if out_names[k] in with_gradient]
    skipped = [out_names[k] for k in float_outputs if out_names[k] not in with_gradient]
    if not projected:
        raise GradcheckError(f"gradcheck {op_type}: no checked output has a gradient with respect to inputs "
                             f"{list(wrt)} (checked: {out_names}; with a gradient: {sorted(with_gradient)})")
    if skipped:
        warnings.warn(f"{op_type}: output {', '.join(map(repr, skipped))} has no gradient; skipped",
                      NoGradientWarning, stacklevel=2)
    rng = np.random.default_rng(seed)
    directions = {k: rng.standard_normal(ys[k].shape) for k in projected}

    graph, input_names = _node_graph(op_type, domain, opset, arrays, attrs, out_names)
    seeds = {}
    for k in projected:
        seeds[out_names[k]] = graph.add_input(f"seed_{k}", np.float64, ys[k].shape)
    grad_graph, grads = build_gradient_graph(graph, [out_names[k] for k in projected],
                                             [input_names[i] for i in wrt], seeds=seeds)
    feeds = {f"x{i}": a for i, a in enumerate(arrays) if a is not None}
    feeds.update({f"seed_{k}": directions[k] for k in projected})
    fetch = [g for g in grads.values() if g]
    analytic = Executor(schedule(grad_graph, fetch, provider)).run(feeds) if fetch else {}
    if provider != "cpu" and fetch:
        on_cpu = Executor(schedule(grad_graph, fetch)).run(feeds)
        for name in fetch:
            np.testing.assert_allclose(analytic[name], on_cpu[name], rtol=1e-10, atol=1e-12,
                                       err_msg=f"{op_type}: gradient {name!r} on {provider} differs from the CPU's")

    def loss_of(arrs):
        return sum(float(np.sum(directions[k] * y)) for k, y in enumerate(forward(arrs)) if k in directions)
    results = {}
    for i in wrt:
        numeric = numeric_gradient(loss_of, arrays, i, eps)
        grad_name = grads[input_names[i]]
        got = analytic.get(grad_name) if grad_name else None
        _compare(f"{op_type} input #{i}", got, numeric, rtol, atol)
        results[i] = (got, numeric)
    return results


def _node_graph(op_type, domain, opset, arrays, attrs, out_names):
    """(graph, input names) of one `op_type` node on inputs x0, x1, ... (absent ones "")
    producing the outputs out_names."""
    sch = get_schema(op_type, domain, opset)
    graph = Graph(opset_imports={domain: opset}, name=f"gradcheck_{op_type}")
    input_names = ["" if a is None else graph.add_input(f"x{i}", a.dtype, a.shape) for i, a in enumerate(arrays)]
    node_outputs = [""] * len(sch.outputs)
    for name in out_names:
        node_outputs[sch.output_index(name)] = name
    graph.add_node(op_type, input_names, node_outputs, attrs, domain, name="checked")
    return graph, input_names


def _outputs_with_gradient(op_type, domain, opset, arrays, attrs, wrt, out_names, ys):
    """The names among out_names (float outputs ys) whose gradient reaches an input in `wrt`:
    each is seeded, and an output whose seed no gradient node reads has no gradient."""
    graph, input_names = _node_graph(op_type, domain, opset, arrays, attrs, out_names)
    seeds = {name: graph.add_input(f"seed_{name}", np.float64, y.shape)
             for name, y in zip(out_names, ys) if y.dtype == np.float64}
    grad_graph, grads = build_gradient_graph(graph, list(seeds), [input_names[i] for i in wrt], seeds=seeds)
    read = {value for node in grad_graph.nodes for value in node.inputs} | set(grads.values())
    return {name for name, seed in seeds.items() if seed in read}


def gradcheck_graph(graph, feeds, wrt, *, loss=None, eps=1e-6, rtol=1e-4, atol=1e-6, seed=0):
    """Check the gradients of a whole graph with respect to `wrt` (graph inputs or
    initializers), in float64.  The loss is the graph's single output (or `loss`), projected
    on a random direction when it is not a scalar.  Returns {name: (analytic, numeric)}."""
    loss = loss or graph.outputs[0]
    base = graph.copy()
    for name, array in base.initializers.items():
        base.initializers[name] = _as_float64(array)
    for value in base.inputs:
        value.dtype = np.dtype(np.float64) if np.issubdtype(value.dtype, np.floating) else value.dtype
    feeds = {k: _as_float64(v) for k, v in feeds.items()}
    names = list(feeds) + [n for n in base.initializers if n not in feeds]
    forward_plan = Executor(schedule(base, [loss]))
    y = forward_plan.run(feeds)[loss]
    direction = np.random.default_rng(seed).standard_normal(y.shape)
    seeds = {}
    if y.size != 1 or y.ndim:
        seeds[loss] = base.add_input("gradcheck_seed", np.float64, y.shape)
    grad_graph, grads = build_gradient_graph(base, loss, wrt, seeds=seeds)
    run_feeds = dict(feeds)
    if seeds:
        run_feeds["gradcheck_seed"] = direction
    else:
        direction = np.ones_like(y)
    fetch = [g for g in grads.values() if g]
    analytic = Executor(schedule(grad_graph, fetch)).run(run_feeds) if fetch else {}

    arrays = [run_feeds[n] if n in run_feeds else base.initializers[n] for n in names]

    def loss_of(arrs):
        executor = Executor(schedule(base, [loss]))
        executor.constants.update({n: a for n, a in zip(names, arrs) if n in base.initializers})
        values = {n: a for n, a in zip(names, arrs) if n in feeds}
        return float(np.sum(direction * executor.run(values)[loss]))
    results = {}
    for name in wrt:
        numeric = numeric_gradient(loss_of, arrays, names.index(name), eps)
        got = analytic.get(grads[name]) if grads[name] else None
        _compare(name, got, numeric, rtol, atol)
        results[name] = (got, numeric)
    return results
