"""TrainingSession: a model, a loss and an optimizer compiled into execution plans once.

The training plan holds forward, loss, backward and the optimizer's in-place update in one
graph, scheduled once; `train_step(inputs, targets)` runs it on NumPy batches and returns the
loss.  The batch dim is symbolic ("N"), so a batch of another size (the last, smaller batch of
an epoch) reuses the same plan.  An inference plan (BatchNorm on running statistics, no
Dropout) serves `eval_step` and `evaluate`.

Gradients and `zero_grad`, as in PyTorch:

- `accumulate(inputs, targets, scale=1)` runs forward and backward and **adds**
  `scale * gradient` into the session's gradient buffers (`session.grads`);
- `step()` applies the optimizer once to the accumulated gradients and does **not** clear them;
- `zero_grad()` sets them to zero; call it before accumulating for the next update;
- `train_step(inputs, targets, micro_batches=k)` is one complete update on one batch: it
  discards any accumulated gradients, and leaves them zero.  With k > 1 it splits the batch into
  k micro-batches, accumulates their gradients weighted by their share of the batch (for mean
  losses), and applies one update: the same update as the whole batch at a fraction of the
  activation memory (BatchNorm statistics are then per micro-batch, as in PyTorch).

BatchNorm running statistics are updated after every training run (train_step or accumulate).

The parameters trained (`trained`: name -> array) are those that require gradients
(Parameter.requires_grad, read when the session is built: changing a flag afterwards makes the
next training call raise, as the compiled plans cannot follow it; build a new session), that the
optimizer's parameter groups list (all by default), and that the loss depends on.  A parameter
the loss does not depend on (a layer defined but unused, an auxiliary head) gets no gradient and
no update, as in PyTorch, and the session says so once in a logging warning.

Precision (`precision=`): "fp32" (the default) computes in the model's float type; "tf32" lets
float32 GEMMs and convolutions use TF32 on CUDA (a no-op on the CPU, as PyTorch's allow_tf32);
"bf16" and "fp16" (CUDA only) rewrite the forward graph with the autocast pass
(minitrain/autocast.py) before the gradient graph is built: convolutions and GEMMs in low
precision, softmax, losses, reductions and normalisations in float32, float32 master weights and
optimizer state.  "fp16" adds dynamic loss scaling (training/loss_scale.py): an update whose
gradients overflow is skipped on the device and the scale halved; `skipped_steps` counts them.
Adam's step count (its bias correction) counts skipped updates too: the host never waits to
learn that one was skipped.

Devices: `device="cuda"` runs the plans on the provider list ["cuda", "cpu"] (each node on the
first provider with a kernel for it; `plan_description()` shows where each landed).  The
parameters, optimizer state, BatchNorm statistics and accumulated gradients live on the device
in one DeviceState shared by the train, gradient-only, update and eval plans; `pull()` copies
them to the host arrays (the model's parameters, `optimizer.state`), which `save` does, and
`push()` copies the host arrays back, which `load` does.

On CUDA each plan's whole step is captured into a CUDA Graph once its input signature has run
twice, and replayed after that (`capture=False` turns it off, for debugging; see
providers/cuda/capture/step_graph.py); `train_step(..., wait=False)` returns at once with the loss as
a PendingScalar, so the host queues the next step while the GPU runs this one.  The loss and
`last_grad_norm` are fetched without waiting and read when asked for.  The model's output is
not copied to the host at every step (on a per-pixel model it outweighs the rest of the
fetch many times over): `last_output` copies it when read, from the device tensor that the
last training run left (valid until the next one), and `train_step(..., fetch_output=True)`
queues its copy with the loss, for a caller that reads it after later steps (the fit loop).

Data parallelism: `data_parallel=True`, after minitrain.distributed.init() in every process that
mpiexec launched, trains one model on all of them (training/data_parallel.py): rank 0's state
is broadcast at start, and every update applies the gradients averaged over the ranks by the
all-reduce nodes in the graph (one, or one per bucket of gradients overlapping the backward
pass), so each rank feeds its share of the global batch.
`average_batchnorm_statistics()` averages the BatchNorm running statistics before evaluation
or a checkpoint; `broadcast_state()` sends rank 0's state to every rank (after rank 0 loaded a
checkpoint).  Gradients read through `grads` are this rank's own, before the average.
"""
from __future__ import annotations

import logging

import numpy as np

from ..autocast import autocast, default_precision, resolve_precision, uncast_gradients
from ..autodiff import build_gradient_graph
from ..errors import GraphError
from ..executor import Executor
from ..fusion import fuse as fuse_graph
from ..fusion import fuse_forward
from ..graph import Graph
from ..nn.module import trace
from ..nn.tensor import GraphBuilder
from ..onnx import load as load_onnx
from ..onnx import save as save_onnx
from ..ops.schema import MS_DOMAIN
from ..providers import get_provider, provider_list
from ..providers.pending import PendingScalar, PendingValues
from ..scheduler import schedule
from . import data_parallel as data_parallelism
from .loss_scale import FOUND_INF, SKIPPED, DynamicLossScale
from .state import DeviceState
from .targets import as_targets

logger = logging.getLogger(__name__)

INPUT, TARGET = "input", "target"
SCALE_INPUT = "accumulate.scale"


class TrainingSession:
    """Compile `model` + `loss` + `optimizer` for inputs of shape (N, *input_shape).

    loss: a loss Module (nn.CrossEntropyLoss(), nn.MSELoss()) called as loss(output, target).
    target_shape/target_dtype: per-sample shape and dtype of the targets; by default the
    loss decides (class labels for cross-entropy, the output's shape for MSE).
    device: "cpu" or "cuda" (or an ordered provider list); `provider` is its older name.
    use_tf32: let float32 GEMMs and convolutions use TF32 on CUDA (off: strict FP32).
    conv_search: how CUDA convolutions pick their algorithm, a dict of ConvSearchOptions'
    fields (providers/cuda_options.py), e.g. {"mode": "heuristic"}; None: the default
    provider's.
    capture: capture each plan's step into a CUDA Graph and replay it (on devices that have
    graphs); on the CPU, serve each step's allocations from a planned arena
    (providers/cpu/step_arena.py).  Default on.
    fuse: rewrite the plans' graphs with fused kernels (minitrain/fusion/) before scheduling,
    and the forward graph before its gradient graph is built (fusion.fuse_forward) (None: on).
    data_parallel: train on every rank of the MPI world (see the module docstring); needs
    minitrain.distributed.init() first.  gradient_buckets: how many all-reduces share the
    gradients, each started as soon as the backward pass has produced its gradients (None:
    training/data_parallel.py's default).
    precision: "fp32", "tf32", "bf16" or "fp16" (see the module docstring), or an
    autocast.Precision; None: the one `with autocast.precision(...)` sets around the
    session's construction, else "fp32" (as torch.autocast regions, but read once, when the
    plans are compiled).  loss_scale: the DynamicLossScale of an "fp16" session (None: PyTorch
    GradScaler's defaults).
    """

    def __init__(self, model, loss, optimizer, *, input_shape, input_dtype=None, target_shape=None,
                 target_dtype=None, device=None, provider="cpu", use_tf32=False, capture=True, fuse=None,
                 conv_search=None, data_parallel=False, precision=None, loss_scale=None, gradient_buckets=None):
        self.world = data_parallelism.require_world() if data_parallel else None
        self.gradient_buckets = data_parallelism.check_bucket_count(gradient_buckets)
        self.model, self.loss, self.optimizer = model, loss, optimizer
        self.providers = tuple(provider_list(device or provider))
        self.device = self.providers[0]
        self.precision = resolve_precision(precision or default_precision(), self.device)
        self.loss_scale = (loss_scale or DynamicLossScale()) if self.precision.loss_scaling else None
        self._provider = get_provider(self.device).for_session(use_tf32=use_tf32 or self.precision.tf32,
                                                               conv_search=conv_search)
        self.capture = bool(capture)
        self.fuse = True if fuse is None else bool(fuse)
        self.state = DeviceState(self._provider)
        named = dict(model.named_parameters())
        self.params = {name: p.data for name, p in named.items()}
        if not self.params:
            raise ValueError("TrainingSession: the model has no parameters to train")
        dtype = np.dtype(input_dtype or next(iter(self.params.values())).dtype)
        self.input_spec = (dtype, ("N",) + tuple(input_shape))
        self._target_shape, self._target_dtype = target_shape, target_dtype
        self._requires_grad = [(p, p.requires_grad) for p in named.values()]
        in_groups = optimizer.assign_groups(self.params)
        wanted = [n for n, p in named.items() if p.requires_grad and n in in_groups]
        if not wanted:
            raise ValueError("TrainingSession: no parameter to train: every one is frozen (requires_grad=False) "
                             "or in none of the optimizer's parameter groups")

        forward, self.output_name, self.loss_name, self.state_updates = self._build(training=True)
        seed = self.loss_name if self.loss_scale is None else self.loss_scale.scale_loss(forward, self.loss_name)
        self.grad_graph, grads = build_gradient_graph(forward, seed, [n for n in wanted if n in forward.initializers])
        if self.world is not None:
            data_parallelism.vary_dropout_seeds(self.grad_graph, self.world.rank)
        self.grad_names = {n: grads[n] for n in wanted if grads.get(n)}
        unused = [n for n in wanted if n not in self.grad_names]
        if unused:
            logger.warning("TrainingSession: the loss does not depend on parameter(s) %s; they get no gradient "
                           "and no update", unused)
        if not self.grad_names:
            raise GraphError(f"TrainingSession: the loss depends on none of the parameters to train {wanted}")
        if self.loss_scale is not None:
            self.grad_names = self.loss_scale.unscale(self.grad_graph, self.grad_names)
        self.trained = {n: self.params[n] for n in self.grad_names}
        optimizer.attach(self.trained, among=self.params)
        train_graph = self.grad_graph.copy()
        self.norm_name = self._add_update(train_graph, self.grad_names)
        self.train_plan = self._schedule(train_graph, [self.loss_name, self.output_name, self.norm_name,
                                                       *self._scaler_fetch, *self.state_updates])
        _check_update_runs_last(self.train_plan, set(self.trained))
        self._train = self._executor(self.train_plan)
        self._grad = None        # forward + backward + accumulation, for accumulate(); built on first use
        self._update = None      # the optimizer update of the accumulated gradients, for step()
        self._eval = {}          # with_loss -> Executor
        self._profiled = None    # the training plan run node by node, timed
        self._grad_buffers = {}  # parameter -> host array of its accumulated gradient
        self._last = None        # PendingValues of the last training run's loss (and gradient norm)
        self._output = None      # PendingValues of the last training run's output
        self._batch_checked = self.world is None
        if self.world is not None:
            data_parallelism.check_world_agrees(data_parallelism.describe(self))
            self.broadcast_state()

    @classmethod
    def from_graph(cls, graph, loss, optimizer, *, trainable=None, **kwargs):
        """A session training `graph` (one input (N, ...), its first output fed to `loss`) with
        no nn model behind it: the graph is wrapped in an nn.GraphModule.  trainable: the
        initializer names to train (None: every floating-point initializer)."""
        from ..nn.graph_module import GraphModule
        if len(graph.inputs) != 1 or graph.inputs[0].shape is None:
            raise ValueError(f"TrainingSession.from_graph: graph {graph.name!r} needs one input of known rank, "
                             f"got {[(v.name, v.shape) for v in graph.inputs]}")
        source = graph.inputs[0]
        kwargs.setdefault("input_dtype", source.dtype)
        return cls(GraphModule(graph, trainable), loss, optimizer, input_shape=source.shape[1:], **kwargs)

    @classmethod
    def from_onnx(cls, model, loss, optimizer, *, trainable=None, **kwargs):
        """from_graph on an ONNX model (a path or a ModelProto; needs the `onnx` extra)."""
        return cls.from_graph(load_onnx(model), loss, optimizer, trainable=trainable, **kwargs)

    @property
    def _scaler_fetch(self):
        """The loss scale's update, fetched so that a plan with an optimizer update runs it."""
        return [] if self.loss_scale is None else [FOUND_INF]

    def _add_update(self, graph, grads):
        """Append the optimizer update (and the loss scale's update after it) to `graph`;
        returns the name of the update's gradient norm.  The update reads a low-precision
        gradient as it is, not its Cast to float32 (autocast.uncast_gradients)."""
        norm = self.optimizer.add_to_graph(graph, uncast_gradients(graph, self._averaged(graph, grads)),
                                           skip_non_finite=self.loss_scale is not None)
        if self.loss_scale is not None:
            self.loss_scale.add_update(graph, norm)
        return norm

    @property
    def skipped_steps(self):
        """Updates skipped for an inf/NaN gradient (fp16 loss scaling; 0 otherwise).  Reading it
        waits for the device."""
        if self.loss_scale is None:
            return 0
        self.state.pull([SKIPPED])
        return self.loss_scale.skipped

    def _executor(self, plan, profile=False):
        return Executor(plan, profile=profile, state=self.state, providers={self.device: self._provider},
                        capture=self.capture, write_back={out: buf for out, buf in self.state_updates.items() if out in plan.fetch})

    def _schedule(self, graph, fetch):
        """The plan of `graph` for `fetch` on the session's providers, fused when `fuse` is on."""
        if self.fuse:
            graph = fuse_graph(graph, fetch, self.providers)
        return schedule(graph, fetch, self.providers)

    def plan_description(self):
        """The training plan, one line per node with the provider it runs on (a fused node is
        named after the nodes it replaces, joined by '+')."""
        return self.train_plan.describe()

    def _averaged(self, graph, grads):
        """`grads` (parameter -> gradient value) as the update reads them: in a data-parallel
        session, averaged over the ranks by the all-reduce added to `graph` (summed for a loss
        with reduction "sum"), the gradient of the loss on the global batch."""
        if self.world is None:
            return grads
        shapes = {param: self.params[param].shape for param in grads}
        mean = getattr(self.loss, "reduction", "mean") == "mean"
        return data_parallelism.all_reduce_gradients(graph, grads, shapes, 1.0 / self.world.size if mean else 1.0,
                                                     self.gradient_buckets)

    def broadcast_state(self):
        """Data-parallel: copy rank 0's parameters, optimizer state and BatchNorm statistics
        into every rank's (done at start; again after rank 0 alone loaded a checkpoint)."""
        if self.world is not None:
            data_parallelism.broadcast_state(self)

    def average_batchnorm_statistics(self):
        """Data-parallel: set every rank's BatchNorm running statistics to their mean over the
        ranks (before evaluating or saving); nothing to do in one process."""
        if self.world is not None:
            data_parallelism.average_batchnorm_statistics(self, sorted(set(self.state_updates.values())))

    def _check_batch(self, inputs, targets):
        """Data-parallel: at the first training step, check that every rank feeds batches of
        one shape."""
        if not self._batch_checked:
            data_parallelism.check_world_agrees(data_parallelism.batch_facts(inputs, targets), "the first batch")
            self._batch_checked = True

    def pull(self):
        """Copy parameters, optimizer state and BatchNorm statistics from the device into the
        host arrays (the model's Parameters, optimizer.state): before reading them on the host."""
        self.state.pull()

    def push(self):
        """Copy the host arrays into the device state: after changing them on the host."""
        self.state.push()

    # ------------------------------------------------------------------ graphs
    def _build(self, training, with_loss=True):
        builder = GraphBuilder("train" if training else "eval", training=training, names=self.model.names())
        output = self.model(builder.input(INPUT, *self.input_spec))
        loss_name = None
        if with_loss:
            self.target_spec = self._target_spec(output)
            target = builder.input(TARGET, *self.target_spec)
            loss = self.loss(output, target)
            if loss.shape is not None and any(d != 1 for d in loss.shape):
                raise ValueError(f"TrainingSession needs a scalar loss, got shape {loss.shape}; "
                                 "use reduction 'mean' or 'sum'")
            loss_name = loss.name
        builder.graph.outputs = [output.name] + ([loss_name] if loss_name else [])
        graph = builder.graph
        if self.fuse:
            graph = fuse_forward(graph, [*graph.outputs, *builder.state_updates], self.providers)
        if self.precision.low is not None:
            graph = autocast(graph, self.precision.low, keep=[*graph.outputs, *builder.state_updates])
        return graph, output.name, loss_name, dict(builder.state_updates)

    def _target_spec(self, output):
        shape = self._target_shape
        if shape is None:
            per_sample = tuple(output.shape[1:]) if output.shape is not None else ()
            shape = per_sample[1:] if getattr(self.loss, "target_dtype", None) == "int64" else per_sample
        dtype = self._target_dtype or getattr(self.loss, "target_dtype", None) or output.dtype
        return np.dtype(dtype), ("N",) + tuple(shape)

    def _eval_executor(self, with_loss):
        if with_loss not in self._eval:
            graph, out, loss, _ = self._build(training=False, with_loss=with_loss)
            plan = self._schedule(graph, [out] + ([loss] if loss else []))
            self._eval[with_loss] = (self._executor(plan), out, loss)
        return self._eval[with_loss]

    def _feeds(self, inputs, targets=None):
        """The plan's feeds; tensors already on the session's device pass as they are."""
        def native(value):
            return not isinstance(value, np.ndarray) and self._provider.is_native(value)
        feeds = {INPUT: inputs if native(inputs) else np.asarray(inputs, dtype=self.input_spec[0])}
        if targets is not None:
            feeds[TARGET] = targets if native(targets) else as_targets(targets, self.target_spec[0])
        return feeds

    # ------------------------------------------------------------------ training
    @property
    def step_count(self):
        """Updates applied so far."""
        return self.optimizer.step_count

    @property
    def last_output(self):
        """The model's output on the last training batch (host array; copied from the device,
        waiting for it, when first read after a step that did not fetch it)."""
        return None if self._output is None else self._output["output"]

    @property
    def last_grad_norm(self):
        """The global gradient norm (before clipping) of the last update."""
        return self.optimizer.last_grad_norm

    def _fetched(self, results, loss_name, output_name, norm_name=None, fetch_output=False):
        """Queue the copies of a run's loss (gradient norm, and output when `fetch_output`) to
        the host; keep the output for last_output; returns the loss as a PendingScalar."""
        values = {"loss": results[loss_name]}
        if fetch_output:
            values["output"] = results[output_name]
        if norm_name is not None:
            values["norm"] = results[norm_name]
        if FOUND_INF in results:
            values["found_inf"] = results[FOUND_INF]
        self._last = self._provider.fetch_async(values)
        output = results[output_name]
        self._output = self._last if fetch_output else PendingValues(
            None, lambda: {"output": self._provider.to_numpy(output)})
        if norm_name is not None:
            self.optimizer.updated(PendingScalar(self._last, "norm"))
        return PendingScalar(self._last, "loss")

    def _check_requires_grad(self):
        """The compiled plans train the parameters that required gradients when they were
        built: a flag changed since is an error, not a silent no-op."""
        changed = [p for p, flag in self._requires_grad if p.requires_grad != flag]
        if changed:
            names = {id(p): n for n, p in self.model.named_parameters()}
            raise ValueError(f"TrainingSession: requires_grad of {[names.get(id(p)) for p in changed]} changed "
                             "after the session was built; build a new TrainingSession to train with it")

    def train_step(self, inputs, targets, micro_batches=1, *, wait=True, fetch_output=False):
        """One update on this batch; returns the loss (mean over micro-batches when split).
        wait=False (one micro-batch) returns at once with a PendingScalar: float() of it
        waits for the step.  fetch_output=True (one micro-batch) queues the copy of the
        model's output with the loss's: the PendingScalar's `values["output"]`, readable
        after later steps."""
        self._check_requires_grad()
        self._check_batch(inputs, targets)
        self.zero_grad()
        if micro_batches == 1:
            results = self._train.run({**self._feeds(inputs, targets), **self.optimizer.feeds()},
                                      [self.loss_name, self.output_name, self.norm_name, *self._scaler_fetch],
                                      to_host=False)
            loss = self._fetched(results, self.loss_name, self.output_name, self.norm_name, fetch_output)
            return float(loss) if wait else loss
        n = len(inputs)
        if not 1 <= micro_batches <= n:
            raise ValueError(f"train_step: micro_batches must be in [1, {n}] for a batch of {n}, got {micro_batches}")
        bounds = np.linspace(0, n, micro_batches + 1).astype(int)
        mean = getattr(self.loss, "reduction", "mean") == "mean"
        total, outputs = 0.0, []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            share = (hi - lo) / n
            total += share * self.accumulate(inputs[lo:hi], targets[lo:hi], scale=share if mean else 1.0)
            outputs.append(self.last_output)
        self.step()
        self.zero_grad()
        self._output = PendingValues({"output": np.concatenate(outputs)})
        return total if mean else total * micro_batches

    def profile_step(self, inputs, targets, path=None, *, fetch_output=False):
        """One update like train_step, run node by node with every node timed (GPU time from
        events on a device); writes the Chrome trace of it to `path` when given.  Returns the
        loss as a PendingScalar (its output fetched as train_step's `fetch_output` says);
        `self._profiled.profile` holds the per-node seconds."""
        if self._profiled is None:
            self._profiled = self._executor(self.train_plan, profile=True)
        self._check_requires_grad()
        self.zero_grad()
        results = self._profiled.run({**self._feeds(inputs, targets), **self.optimizer.feeds()},
                                     [self.loss_name, self.output_name, self.norm_name, *self._scaler_fetch],
                                     to_host=False)
        loss = self._fetched(results, self.loss_name, self.output_name, self.norm_name, fetch_output)
        if path:
            self._profiled.profiler.write_chrome_trace(path)
        return loss

    @property
    def grads(self):
        """The accumulated gradients (parameter name -> host array), pulled from the device."""
        names = {param: f"grad_acc.{param}" for param in self._grad_buffers}
        self.state.pull(list(names.values()))
        return dict(self._grad_buffers)

    def _build_accumulation(self):
        """The gradient plan, each gradient added in place into its buffer (InPlaceAccumulator
        nodes, which read a low-precision gradient as it is: autocast.uncast_gradients), and the
        update plan that applies the optimizer to those buffers."""
        graph = self.grad_graph.copy()
        graph.add_input(SCALE_INPUT, self.input_spec[0], ())
        accumulated, buffers = [], {}
        for param, grad_name in uncast_gradients(graph, self.grad_names).items():
            self._grad_buffers[param] = np.zeros_like(self.params[param])
            buffers[param] = graph.add_initializer(f"grad_acc.{param}", self._grad_buffers[param])
            accumulated.append(graph.add_node("InPlaceAccumulator", [buffers[param], grad_name, SCALE_INPUT],
                                              domain=MS_DOMAIN, name=f"accumulate.{param}"))
        fetch = [self.loss_name, self.output_name, *accumulated, *self.state_updates]
        self._grad = self._executor(self._schedule(graph, fetch))
        update = Graph(initializers={**self.trained, **{buffers[p]: self._grad_buffers[p] for p in buffers}},
                       name="update")
        norm = self._add_update(update, buffers)
        self._update = (self._executor(self._schedule(update, [norm, *self._scaler_fetch])), norm)

    def accumulate(self, inputs, targets, scale=1.0):
        """Forward and backward on a batch; add scale * gradients into the gradient buffers
        (`self.grads`) on the device.  Returns the loss."""
        self._check_requires_grad()
        self._check_batch(inputs, targets)
        if self._grad is None:
            self._build_accumulation()
        feeds = {**self._feeds(inputs, targets), SCALE_INPUT: np.array(scale, dtype=self.input_spec[0])}
        results = self._grad.run(feeds, [self.loss_name, self.output_name], to_host=False)
        return float(self._fetched(results, self.loss_name, self.output_name))

    def step(self):
        """Apply the optimizer to the accumulated gradients (which are kept; see zero_grad)."""
        if self._update is None:
            raise RuntimeError("step(): no gradients accumulated; call accumulate() first")
        executor, norm = self._update
        results = executor.run(self.optimizer.feeds())
        self.optimizer.updated(float(results[norm]))
        return self.last_grad_norm

    def zero_grad(self):
        """Set the accumulated gradients to zero."""
        for param in self._grad_buffers:
            self._provider.fill_zero(self.state.native(f"grad_acc.{param}"))

    # ------------------------------------------------------------------ inference
    def eval_step(self, inputs):
        """Model outputs in inference mode (BatchNorm on running statistics, no Dropout)."""
        executor, out, _ = self._eval_executor(with_loss=False)
        return executor.run(self._feeds(inputs))[out]

    def evaluate(self, inputs, targets):
        """(loss, outputs) in inference mode."""
        executor, out, loss = self._eval_executor(with_loss=True)
        results = executor.run(self._feeds(inputs, targets))
        return float(results[loss]), results[out]

    # ------------------------------------------------------------------ export
    def export_graph(self, what="inference"):
        """The graph `export` writes: for "training" the forward, loss and gradient graph; for
        "inference" the model traced in eval mode with the current parameters (pulled from the
        device first)."""
        if what == "training":
            return self.grad_graph
        self.pull()
        builder, _ = trace(self.model, {INPUT: self.input_spec}, training=False, name="inference")
        return builder.graph

    def export(self, path, what="inference"):
        """Write the session's model to `path` as an ONNX model (minitrain.onnx.save; needs the
        `onnx` extra); returns the ModelProto written."""
        return save_onnx(self, path, what)

    # ------------------------------------------------------------------ checkpoints
    def save(self, path, extra=None):
        """Write a checkpoint (see minitrain.checkpoint) of the state pulled from the device."""
        from ..checkpoint import save
        save(path, self, extra)

    def load(self, path):
        """Restore a checkpoint written by save() on any device; returns its `extra` dict."""
        from ..checkpoint import load
        return load(path, self)


def _check_update_runs_last(plan, params):
    """The update overwrites parameters in place: every other reader must run before it."""
    update = next(i for i, s in enumerate(plan.steps) if s.node.name == "optimizer_update")
    late = [s.node.name for s in plan.steps[update + 1:] if params & set(s.node.inputs)]
    if late:
        raise GraphError(f"the optimizer update is scheduled before nodes that read parameters: {late}")
