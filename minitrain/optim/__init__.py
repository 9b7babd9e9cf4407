"""Optimizers (SGD, Adam, AdamW) as in-place update kernels, gradient clipping by global norm,
and learning-rate schedules (step, cosine, linear warm-up)."""
from .clip import clip_grad_norm, global_norm
from .optimizer import SGD, Adam, AdamW, Optimizer
from .schedules import Constant, CosineLR, LinearWarmup, StepLR

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "clip_grad_norm", "global_norm", "Constant", "StepLR",
           "CosineLR", "LinearWarmup"]
