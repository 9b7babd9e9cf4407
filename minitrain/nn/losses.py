"""Loss modules: called as loss(prediction, target) on symbolic Tensors, they return a scalar
Tensor (or per-element losses with reduction="none")."""
from . import functional as F
from .module import Module


class CrossEntropyLoss(Module):
    """Softmax cross-entropy of scores (N, C, ...) against int64 class labels (N, ...);
    reduction "mean" (over the labels not equal to ignore_index), "sum" or "none"."""
    target_dtype = "int64"

    def __init__(self, reduction="mean", ignore_index=None):
        super().__init__()
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"CrossEntropyLoss: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        self.reduction, self.ignore_index = reduction, ignore_index

    def forward(self, scores, labels):
        return F.cross_entropy(scores, labels, self.reduction, self.ignore_index)


class MSELoss(Module):
    """Mean squared error between a prediction and a target of the same shape."""
    target_dtype = None      # the prediction's dtype

    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"MSELoss: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        self.reduction = reduction

    def forward(self, prediction, target):
        return F.mse_loss(prediction, target, self.reduction)
