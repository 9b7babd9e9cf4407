"""Optimizers: SGD (momentum, Nesterov, weight decay), Adam and AdamW (decoupled weight decay).

An optimizer owns its state (momentum buffers, Adam moments) and the count of updates done.
The update itself is a registered kernel (SGDOptimizer / AdamOptimizer in com.microsoft) that
overwrites parameters and state in place.  Two ways to apply it:

- inside a compiled training plan: `add_to_graph` appends the update node to a gradient graph,
  with the state as initializers and the learning rate and step as graph inputs that
  `feeds()` supplies before each run (this is what TrainingSession does);
- directly: `step(grads)` runs the same kernel on gradient arrays (gradient accumulation,
  hand-written loops).

In both cases call `attach(params)` first with the parameter arrays, which must be
C-contiguous: the kernel writes into them.
"""
from __future__ import annotations

import numpy as np

from ..executor import run_node
from ..ops.schema import MS_DOMAIN
from .schedules import Constant

LR_INPUT = "optimizer.learning_rate"
STEP_INPUT = "optimizer.step"


class Optimizer:
    """Base class.  Subclasses set `op_type`, `state_names` and `attrs()`."""
    op_type = ""
    state_names = ()
    takes_step = False

    def __init__(self, lr, *, max_grad_norm=None, schedule=None):
        if lr <= 0:
            raise ValueError(f"{type(self).__name__}: lr must be > 0, got {lr!r}")
        if max_grad_norm is not None and max_grad_norm <= 0:
            raise ValueError(f"{type(self).__name__}: max_grad_norm must be > 0, got {max_grad_norm!r}")
        self.lr = float(lr)
        self.max_grad_norm = max_grad_norm
        self.schedule = schedule or Constant()
        self.step_count = 0
        self.params = {}
        self.state = {}          # state name -> {param name: array}
        self._grad_norm = None   # a number, or a PendingScalar read when asked for

    # ------------------------------------------------------------------ setup
    def attach(self, params):
        """Take the parameters to update (name -> contiguous float array) and make zeroed state."""
        for name, p in params.items():
            if not isinstance(p, np.ndarray) or not p.flags.c_contiguous:
                raise ValueError(f"{type(self).__name__}: parameter {name!r} must be a C-contiguous "
                                 "NumPy array (it is updated in place)")
        self.params = dict(params)
        self.state = {s: {n: np.zeros_like(p) for n, p in self.params.items()} for s in self.state_names}
        return self

    def attrs(self):
        return {"max_norm": float(self.max_grad_norm or 0.0)}

    def current_lr(self):
        """The learning rate of the next update (base lr times the schedule's factor)."""
        return self.lr * self.schedule(self.step_count)

    def _dtype(self):
        return next(iter(self.params.values())).dtype if self.params else np.dtype(np.float32)

    def _scalar_inputs(self):
        lr = np.array(self.current_lr(), dtype=self._dtype())
        return [lr, np.array(self.step_count + 1, dtype=np.int64)] if self.takes_step else [lr]

    def _tensors(self, grads_in_order):
        names = list(self.params)
        state = [self.state[s][n] for s in self.state_names for n in names]
        return [self.params[n] for n in names] + list(grads_in_order) + state

    # ------------------------------------------------------------------ in a graph
    def add_to_graph(self, graph, grads):
        """Append the update node to `graph`; `grads` maps each attached parameter to the name
        of its gradient value.  Returns the node's output name (the global gradient norm),
        which must be fetched for the update to run."""
        missing = [n for n in self.params if not grads.get(n)]
        if missing:
            raise ValueError(f"{type(self).__name__}: no gradient for parameter(s) {missing}; "
                             "the loss does not depend on them")
        state_names = []
        for s in self.state_names:
            for n in self.params:
                state_names.append(graph.add_initializer(f"optimizer.{s}.{n}", self.state[s][n]))
        scalars = [graph.add_input(LR_INPUT, self._dtype(), ())]
        if self.takes_step:
            scalars.append(graph.add_input(STEP_INPUT, np.int64, ()))
        inputs = scalars + list(self.params) + [grads[n] for n in self.params] + state_names
        return graph.add_node(self.op_type, inputs, ["optimizer.grad_norm"], self.attrs(), MS_DOMAIN,
                              name="optimizer_update")

    def feeds(self):
        """The graph inputs of the next update: learning rate (and step)."""
        values = self._scalar_inputs()
        names = [LR_INPUT, STEP_INPUT][:len(values)]
        return dict(zip(names, values))

    def updated(self, grad_norm):
        """Record that the graph ran one update; `grad_norm` may be a PendingScalar, read
        (waiting for the device) only when last_grad_norm is."""
        self.step_count += 1
        self._grad_norm = grad_norm

    @property
    def last_grad_norm(self):
        """The global gradient norm (before clipping) of the last update, or None."""
        if self._grad_norm is not None and not isinstance(self._grad_norm, float):
            self._grad_norm = float(self._grad_norm)
        return self._grad_norm

    # ------------------------------------------------------------------ directly
    def step(self, grads):
        """Apply one update with gradients given as arrays (name -> array, every attached
        parameter).  Returns the global gradient norm before clipping."""
        missing = [n for n in self.params if n not in grads]
        if missing:
            raise ValueError(f"{type(self).__name__}.step: no gradient for {missing}")
        inputs = self._scalar_inputs() + self._tensors([grads[n] for n in self.params])
        (norm,) = run_node(self.op_type, inputs, attrs=self.attrs(), domain=MS_DOMAIN)
        self.updated(norm)
        return self.last_grad_norm

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self):
        """Arrays (copies) and scalars that `load_state_dict` restores."""
        arrays = {f"{s}/{n}": a.copy() for s, group in self.state.items() for n, a in group.items()}
        return {"type": type(self).__name__, "step_count": self.step_count, "arrays": arrays}

    def check_state_dict(self, state):
        """Raise ValueError unless `state` fits this optimizer and its parameters."""
        if state.get("type") != type(self).__name__:
            raise ValueError(f"optimizer state is for {state.get('type')!r}, this is {type(self).__name__}")
        expected = {f"{s}/{n}": a for s, group in self.state.items() for n, a in group.items()}
        arrays = state.get("arrays", {})
        if set(arrays) != set(expected):
            raise ValueError(f"optimizer state holds {sorted(arrays)}, expected {sorted(expected)}")
        for key, a in arrays.items():
            if a.shape != expected[key].shape or a.dtype != expected[key].dtype:
                raise ValueError(f"optimizer state {key!r} is {a.dtype}{a.shape}, expected "
                                 f"{expected[key].dtype}{expected[key].shape}")

    def load_state_dict(self, state):
        """Restore state in place (the arrays keep their identity, so compiled plans see it)."""
        self.check_state_dict(state)
        for key, a in state["arrays"].items():
            s, n = key.split("/", 1)
            np.copyto(self.state[s][n], a)
        self.step_count = int(state["step_count"])


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, Nesterov momentum and L2 weight
    decay (added to the gradient), as torch.optim.SGD with dampening 0."""
    op_type = "SGDOptimizer"

    def __init__(self, lr=0.01, momentum=0.0, *, nesterov=False, weight_decay=0.0, max_grad_norm=None,
                 schedule=None):
        super().__init__(lr, max_grad_norm=max_grad_norm, schedule=schedule)
        if momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: momentum and weight_decay must be >= 0, got {momentum!r}, {weight_decay!r}")
        if nesterov and momentum == 0:
            raise ValueError("SGD: nesterov needs momentum > 0")
        self.momentum, self.nesterov, self.weight_decay = float(momentum), bool(nesterov), float(weight_decay)
        self.state_names = ("momentum",) if momentum else ()

    def attrs(self):
        return {**super().attrs(), "momentum": self.momentum, "nesterov": int(self.nesterov),
                "weight_decay": self.weight_decay}


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction; weight_decay is L2 added to the gradient, as
    torch.optim.Adam does."""
    op_type = "AdamOptimizer"
    state_names = ("m", "v")
    takes_step = True
    decoupled = False

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, *, weight_decay=0.0, max_grad_norm=None,
                 schedule=None):
        super().__init__(lr, max_grad_norm=max_grad_norm, schedule=schedule)
        if not all(0 <= b < 1 for b in betas) or eps <= 0 or weight_decay < 0:
            raise ValueError(f"{type(self).__name__}: need 0 <= betas < 1, eps > 0, weight_decay >= 0; "
                             f"got betas={betas!r}, eps={eps!r}, weight_decay={weight_decay!r}")
        self.betas, self.eps, self.weight_decay = tuple(float(b) for b in betas), float(eps), float(weight_decay)

    def attrs(self):
        return {**super().attrs(), "beta1": self.betas[0], "beta2": self.betas[1], "epsilon": self.eps,
                "weight_decay": self.weight_decay, "decoupled_weight_decay": int(self.decoupled)}


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter): w *= 1 - lr * weight_decay
    before the Adam update, as torch.optim.AdamW does."""
    decoupled = True

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, *, weight_decay=0.01, max_grad_norm=None,
                 schedule=None):
        super().__init__(lr, betas, eps, weight_decay=weight_decay, max_grad_norm=max_grad_norm,
                         schedule=schedule)
