"""Learning-rate schedules: callables mapping the update index t (0 for the first update) to a
factor of the optimizer's base learning rate.  They compose: LinearWarmup(100, CosineLR(900))."""
import math


class Constant:
    """Factor 1 at every step."""

    def __call__(self, t):
        return 1.0


class StepLR:
    """Multiply by `gamma` every `step_size` updates (PyTorch's StepLR, counted in updates)."""

    def __init__(self, step_size, gamma=0.1):
        if int(step_size) < 1:
            raise ValueError(f"StepLR: step_size must be >= 1, got {step_size!r}")
        self.step_size, self.gamma = int(step_size), float(gamma)

    def __call__(self, t):
        return self.gamma ** (t // self.step_size)


class CosineLR:
    """Half a cosine from 1 down to `min_factor` over `total_steps` updates, then flat."""

    def __init__(self, total_steps, min_factor=0.0):
        if int(total_steps) < 1:
            raise ValueError(f"CosineLR: total_steps must be >= 1, got {total_steps!r}")
        self.total_steps, self.min_factor = int(total_steps), float(min_factor)

    def __call__(self, t):
        progress = min(t, self.total_steps) / self.total_steps
        return self.min_factor + (1 - self.min_factor) * 0.5 * (1 + math.cos(math.pi * progress))


class LinearWarmup:
    """Ramp linearly from 1/warmup_steps to 1 over the first `warmup_steps` updates, then
    follow `then` (a schedule started at 0 when the warm-up ends; constant 1 by default)."""

    def __init__(self, warmup_steps, then=None):
        if int(warmup_steps) < 0:
            raise ValueError(f"LinearWarmup: warmup_steps must be >= 0, got {warmup_steps!r}")
        self.warmup_steps, self.then = int(warmup_steps), then or Constant()

    def __call__(self, t):
        if t < self.warmup_steps:
            return (t + 1) / self.warmup_steps
        return self.then(t - self.warmup_steps)
