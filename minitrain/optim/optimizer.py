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

Parameter groups are written as in torch.optim: the first argument is the parameters (the
model's Parameters, their names, or their arrays), or a list of groups, dicts holding
"params" and optionally their own "lr" and "weight_decay":

    SGD([{"params": decayed}, {"params": ["fc.bias"], "weight_decay": 0}], lr=0.1, momentum=0.9)

Without parameters (`SGD(lr=0.1)`, or the older spelling `SGD(0.1)`) an optimizer takes every
parameter it is attached to.  `param_groups` holds each group's settings: a group's lr may be
changed between updates (the schedule multiplies it); its weight decay is part of a compiled
update and is read when the update is built.  One update node serves every group: the kernels
take one learning rate per parameter and an attribute with one decay per parameter when the
groups differ.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..errors import OptimizerArgumentError
from ..executor import run_node
from ..nn.module import Buffer, Parameter
from ..ops.schema import MS_DOMAIN
from .schedules import Constant

LR_INPUT = "optimizer.learning_rate"
STEP_INPUT = "optimizer.step"
GROUP_SETTINGS = ("lr", "weight_decay")     # what a parameter group may set for itself


def check_real(owner, arg, value, *, minimum=None, above=None, below=None):
    """`value` as a float; OptimizerArgumentError naming owner, argument and value unless it is
    a finite real number (not a bool) within the given bounds."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise OptimizerArgumentError(f"{owner}: {arg} must be a real number, got {value!r} "
                                     f"({type(value).__name__})")
    number = float(value)
    bounds = [("must be >= {}", minimum, lambda b: number >= b), ("must be > {}", above, lambda b: number > b),
              ("must be < {}", below, lambda b: number < b)]
    if not math.isfinite(number):
        raise OptimizerArgumentError(f"{owner}: {arg} must be finite, got {value!r}")
    for text, bound, holds in bounds:
        if bound is not None and not holds(bound):
            raise OptimizerArgumentError(f"{owner}: {arg} {text.format(bound)}, got {value!r}")
    return number


def _describe(entry):
    return repr(entry) if isinstance(entry, str) else f"a {type(entry).__name__} of shape {np.shape(entry)}"


class Optimizer:
    """Base class.  Subclasses set `op_type`, `state_names` and `attrs()`."""
    op_type = ""
    state_names = ()
    takes_step = False

    def __init__(self, params, lr, *, default_lr, weight_decay, max_grad_norm=None, schedule=None):
        name = type(self).__name__
        if isinstance(params, numbers.Real) and not isinstance(params, bool):
            if lr is not None:
                raise OptimizerArgumentError(f"{name}: the first argument {params!r} is the learning rate, so lr="
                                             f"{lr!r} cannot be given too; pass the other settings by keyword")
            params, lr = None, params
        self.defaults = {"lr": check_real(name, "lr", default_lr if lr is None else lr, above=0),
                         "weight_decay": check_real(name, "weight_decay", weight_decay, minimum=0)}
        self.max_grad_norm = None if max_grad_norm is None else check_real(name, "max_grad_norm", max_grad_norm,
                                                                           above=0)
        if schedule is not None and not callable(schedule):
            raise OptimizerArgumentError(f"{name}: schedule must be a callable of the update index, got "
                                         f"{schedule!r}")
        self.schedule = schedule or Constant()
        self.param_groups = self._make_groups(params)
        self.step_count = 0
        self.params = {}
        self.state = {}          # state name -> {param name: array}
        self._group_of = []      # group index of each attached parameter, in order
        self._groups_used = []   # the group indices that hold an attached parameter, ascending
        self._compiled_decays = None
        self._grad_norm = None   # a number, or a PendingScalar read when asked for

    def _make_groups(self, params):
        """param_groups from the first argument: one group of every attached parameter (None),
        one group of the given parameters, or the given group dicts with the defaults filled in."""
        name = type(self).__name__
        if params is None:
            return [{"params": None, **self.defaults}]
        if isinstance(params, (str, dict, np.ndarray)) or not hasattr(params, "__iter__"):
            raise OptimizerArgumentError(
                f"{name}: the first argument is the learning rate or the parameters (Parameters, their names or "
                f"arrays, or a list of group dicts), got {params!r} ({type(params).__name__})")
        params = list(params)
        if not params:
            raise OptimizerArgumentError(f"{name}: the parameter list is empty")
        groups = params if all(isinstance(g, dict) for g in params) else [{"params": params}]
        made = []
        for i, group in enumerate(groups):
            if not isinstance(group, dict):
                raise OptimizerArgumentError(f"{name}: parameter group {i} is a {type(group).__name__}; give "
                                             "either parameters or group dicts, not both")
            unknown = sorted(set(group) - {"params", *GROUP_SETTINGS})
            if unknown or "params" not in group:
                raise OptimizerArgumentError(
                    f"{name}: parameter group {i} " + (f"sets {unknown}; a group may set only "
                                                        f"{list(GROUP_SETTINGS)}" if unknown else "has no 'params'"))
            entries = group["params"]
            entries = [entries] if isinstance(entries, (str, np.ndarray)) or not hasattr(entries, "__iter__") \
                else list(entries)
            for entry in entries:
                if isinstance(entry, Buffer) or not isinstance(entry, (str, np.ndarray, Parameter)):
                    raise OptimizerArgumentError(f"{name}: parameter group {i} holds {entry!r}; expected Parameters, "
                                                 "parameter names or arrays")
            settings = {k: check_real(name, f"parameter group {i}'s {k}", group.get(k, self.defaults[k]),
                                      above=0 if k == "lr" else None, minimum=0 if k != "lr" else None)
                        for k in GROUP_SETTINGS}
            made.append({"params": entries, **settings})
        return made

    # ------------------------------------------------------------------ setup
    def assign_groups(self, named):
        """{parameter name: group index} for every parameter of `named` (name -> Parameter or
        array: all of a model's parameters) that a group lists (all of them, in group 0, when
        the optimizer was given no parameters).  Raises OptimizerArgumentError for an entry
        that names no parameter of `named`, or a parameter listed twice."""
        name = type(self).__name__
        if self.param_groups[0]["params"] is None:
            return {n: 0 for n in named}
        def array(value):
            return value.data if isinstance(value, Parameter) else value
        by_array = {id(array(v)): n for n, v in named.items()}
        assigned = {}
        for i, group in enumerate(self.param_groups):
            for entry in group["params"]:
                key = entry if isinstance(entry, str) else by_array.get(id(array(entry)))
                if key not in named:
                    raise OptimizerArgumentError(f"{name}: parameter group {i} lists {_describe(entry)}, which is "
                                                 f"not a parameter of the model ({sorted(named)})")
                if key in assigned:
                    raise OptimizerArgumentError(f"{name}: parameter {key!r} is in parameter groups "
                                                 f"{assigned[key]} and {i}")
                assigned[key] = i
        return assigned

    def attach(self, params, *, among=None):
        """Take the parameters to update (name -> contiguous float array) and make zeroed state.
        among: every parameter of the model by name, for groups that list parameters `params`
        leaves out (frozen or unused ones); by default `params` itself."""
        for name, p in params.items():
            if not isinstance(p, np.ndarray) or not p.flags.c_contiguous:
                raise ValueError(f"{type(self).__name__}: parameter {name!r} must be a C-contiguous "
                                 "NumPy array (it is updated in place)")
        group_of = self.assign_groups(params if among is None else among)
        outside = [n for n in params if n not in group_of]
        if outside:
            raise OptimizerArgumentError(f"{type(self).__name__}: parameter(s) {outside} are in no parameter group")
        self.params = dict(params)
        self._group_of = [group_of[n] for n in self.params]
        self._groups_used = sorted(set(self._group_of))
        self.state = {s: {n: np.zeros_like(p) for n, p in self.params.items()} for s in self.state_names}
        return self

    def per_parameter(self, setting):
        """The group setting ("lr", "weight_decay") of each attached parameter, in order."""
        return [self.param_groups[g][setting] for g in self._group_of]

    def _decay_attrs(self):
        """weight_decay, or weight_decays (one per parameter) when the groups differ."""
        decays = self.per_parameter("weight_decay")
        if len(set(decays)) > 1:
            return {"weight_decay": 0.0, "weight_decays": decays}
        return {"weight_decay": decays[0] if decays else self.defaults["weight_decay"]}

    def attrs(self):
        return {"max_norm": float(self.max_grad_norm or 0.0), **self._decay_attrs()}

    def current_lr(self):
        """The learning rate of the next update (the first group's lr times the schedule's
        factor; current_lrs() gives every group's)."""
        return self.current_lrs()[0]

    def current_lrs(self):
        """Every parameter group's learning rate for the next update."""
        factor = self.schedule(self.step_count)
        return [group["lr"] * factor for group in self.param_groups]

    def _dtype(self):
        return next(iter(self.params.values())).dtype if self.params else np.dtype(np.float32)

    def _scalar_inputs(self):
        """The learning rate (a scalar, or one per parameter when they lie in several groups)
        and, for Adam, the step."""
        lrs = self.current_lrs()
        if len(self._groups_used) > 1:
            lr = np.array([lrs[g] for g in self._group_of], dtype=self._dtype())
        else:
            lr = np.array(lrs[self._group_of[0]] if self._group_of else lrs[0], dtype=self._dtype())
        return [lr, np.array(self.step_count + 1, dtype=np.int64)] if self.takes_step else [lr]

    def _tensors(self, grads_in_order):
        names = list(self.params)
        state = [self.state[s][n] for s in self.state_names for n in names]
        return [self.params[n] for n in names] + list(grads_in_order) + state

    # ------------------------------------------------------------------ in a graph
    def add_to_graph(self, graph, grads, *, skip_non_finite=False):
        """Append the update node to `graph`; `grads` maps each attached parameter to the name
        of its gradient value.  Returns the node's output name (the global gradient norm),
        which must be fetched for the update to run.  skip_non_finite: the update leaves
        everything as it is when a gradient holds inf or NaN (float16 loss scaling)."""
        missing = [n for n in self.params if not grads.get(n)]
        if missing:
            raise ValueError(f"{type(self).__name__}: no gradient for parameter(s) {missing}; "
                             "the loss does not depend on them")
        state_names = []
        for s in self.state_names:
            for n in self.params:
                state_names.append(graph.add_initializer(f"optimizer.{s}.{n}", self.state[s][n]))
        lr_shape = self._scalar_inputs()[0].shape
        scalars = [graph.add_input(LR_INPUT, self._dtype(), lr_shape)]
        if self.takes_step:
            scalars.append(graph.add_input(STEP_INPUT, np.int64, ()))
        inputs = scalars + list(self.params) + [grads[n] for n in self.params] + state_names
        self._compiled_decays = self._group_decays()
        attrs = {**self.attrs(), **({"skip_non_finite": 1} if skip_non_finite else {})}
        return graph.add_node(self.op_type, inputs, ["optimizer.grad_norm"], attrs, MS_DOMAIN,
                              name="optimizer_update")

    def feeds(self):
        """The graph inputs of the next update: learning rate (and step).  Raises
        OptimizerArgumentError when a group's weight decay changed after the update was built."""
        decays = self._group_decays()
        if self._compiled_decays is not None and decays != self._compiled_decays:
            changed = [g for g, old, new in zip(self._groups_used, self._compiled_decays, decays) if old != new]
            raise OptimizerArgumentError(f"{type(self).__name__}: the weight_decay of parameter group(s) {changed} "
                                         "changed after the update was compiled; build a new session to use it")
        values = self._scalar_inputs()
        names = [LR_INPUT, STEP_INPUT][:len(values)]
        return dict(zip(names, values))

    def _group_decays(self):
        """The weight decay of each group that holds a parameter (see _groups_used)."""
        return [self.param_groups[g]["weight_decay"] for g in self._groups_used]

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
    def _group_members(self):
        return [[n for n, g in zip(self.params, self._group_of) if g == i] for i in range(len(self.param_groups))]

    def state_dict(self):
        """Arrays (copies) and scalars that `load_state_dict` restores: the state arrays, the
        update count, and each parameter group's lr, weight decay and attached parameters."""
        arrays = {f"{s}/{n}": a.copy() for s, group in self.state.items() for n, a in group.items()}
        groups = [{"lr": g["lr"], "weight_decay": g["weight_decay"], "params": members}
                  for g, members in zip(self.param_groups, self._group_members())]
        return {"type": type(self).__name__, "step_count": self.step_count, "arrays": arrays, "groups": groups}

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
        groups = state.get("groups")
        if groups is not None:
            members = [g.get("params") if isinstance(g, dict) else g for g in groups]
            if members != self._group_members():
                raise ValueError(f"optimizer state holds the parameter groups {members}, this optimizer "
                                 f"{self._group_members()}")
            for i, group in enumerate(groups):
                check_real(type(self).__name__, f"parameter group {i}'s lr in the state", group.get("lr"), above=0)
                check_real(type(self).__name__, f"parameter group {i}'s weight_decay in the state",
                           group.get("weight_decay"), minimum=0)

    def load_state_dict(self, state):
        """Restore state in place (the arrays keep their identity, so compiled plans see it)."""
        self.check_state_dict(state)
        for key, a in state["arrays"].items():
            s, n = key.split("/", 1)
            np.copyto(self.state[s][n], a)
        for group, saved in zip(self.param_groups, state.get("groups") or []):
            group.update({key: float(saved[key]) for key in GROUP_SETTINGS})
        self.step_count = int(state["step_count"])


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, Nesterov momentum and L2 weight
    decay (added to the gradient), as torch.optim.SGD with dampening 0.

    params: the parameters or parameter groups (see the module docstring; None: every
    parameter of the session's model), or the learning rate itself (`SGD(0.1)`).
    lr: 0.01 unless given; max_grad_norm: clip the gradients' global norm first;
    schedule: a factor of every group's lr by update index (minitrain.optim.schedules)."""
    op_type = "SGDOptimizer"

    def __init__(self, params=None, lr=None, momentum=0.0, *, nesterov=False, weight_decay=0.0,
                 max_grad_norm=None, schedule=None):
        super().__init__(params, lr, default_lr=0.01, weight_decay=weight_decay, max_grad_norm=max_grad_norm,
                         schedule=schedule)
        self.momentum = check_real("SGD", "momentum", momentum, minimum=0)
        if not isinstance(nesterov, (bool, np.bool_)):
            raise OptimizerArgumentError(f"SGD: nesterov must be True or False, got {nesterov!r}")
        if nesterov and self.momentum == 0:
            raise OptimizerArgumentError("SGD: nesterov needs momentum > 0")
        self.nesterov = bool(nesterov)
        self.state_names = ("momentum",) if self.momentum else ()

    def attrs(self):
        return {**super().attrs(), "momentum": self.momentum, "nesterov": int(self.nesterov)}


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction; weight_decay is L2 added to the gradient, as
    torch.optim.Adam does.  params, max_grad_norm, schedule: as SGD's; lr: 1e-3 unless given."""
    op_type = "AdamOptimizer"
    state_names = ("m", "v")
    takes_step = True
    decoupled = False

    def __init__(self, params=None, lr=None, betas=(0.9, 0.999), eps=1e-8, *, weight_decay=0.0,
                 max_grad_norm=None, schedule=None):
        super().__init__(params, lr, default_lr=1e-3, weight_decay=weight_decay, max_grad_norm=max_grad_norm,
                         schedule=schedule)
        name = type(self).__name__
        if isinstance(betas, (str, bytes)) or not hasattr(betas, "__len__") or len(betas) != 2:
            raise OptimizerArgumentError(f"{name}: betas must be a pair of numbers in [0, 1), got {betas!r}")
        self.betas = tuple(check_real(name, f"betas[{i}]", b, minimum=0, below=1) for i, b in enumerate(betas))
        self.eps = check_real(name, "eps", eps, above=0)

    def attrs(self):
        return {**super().attrs(), "beta1": self.betas[0], "beta2": self.betas[1], "epsilon": self.eps,
                "decoupled_weight_decay": int(self.decoupled)}


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter).

    mode="torch" (ONNX Runtime's adam_mode 0): w *= 1 - lr * weight_decay before the Adam
    update, as torch.optim.AdamW does.  mode="huggingface" (adam_mode 1, what
    onnxruntime.training's generate_artifacts writes, with eps=1e-6): Hugging Face's AdamW,
    the bias corrections folded into the step lr * sqrt(1 - beta2^t) / (1 - beta1^t), eps
    added to sqrt(v) itself, and the decay applied after the update."""
    decoupled = True
    MODES = {"torch": 0, "huggingface": 1}

    def __init__(self, params=None, lr=None, betas=(0.9, 0.999), eps=1e-8, *, weight_decay=0.01,
                 max_grad_norm=None, schedule=None, mode="torch"):
        super().__init__(params, lr, betas, eps, weight_decay=weight_decay, max_grad_norm=max_grad_norm,
                         schedule=schedule)
        if mode not in self.MODES:
            raise OptimizerArgumentError(f"AdamW: mode must be one of {sorted(self.MODES)}, got {mode!r}")
        self.mode = mode

    def attrs(self):
        return {**super().attrs(), "adam_mode": self.MODES[self.mode]}
