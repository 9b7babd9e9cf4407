"""The layer API: Modules that build graphs on symbolic Tensors, PyTorch style.

    model = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.Relu(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(6 * 14 * 14, 10))
    builder, logits = nn.trace(model, {"x": (np.float32, ("N", 1, 28, 28))})

Parameters are named by their path (`0.weight`, `4.bias`): `model.parameters()` yields the
Parameters, `model.named_parameters()` (name, Parameter) pairs, as in PyTorch, and PyTorch's
spellings nn.ReLU and nn.LeakyReLU name Relu and LeakyRelu.  Custom models subclass Module and
write forward() with layers, `functional` and Tensor arithmetic (a residual block adds its input
to its output with `+`).
"""
from . import functional, init
from .layers import (AvgPool1d, AvgPool2d, AvgPool3d, BatchNorm1d, BatchNorm2d, BatchNorm3d, Conv1d, Conv2d, Conv3d,
                     ConvTranspose1d, ConvTranspose2d, ConvTranspose3d, Dropout, Flatten, GlobalAvgPool, Identity,
                     LeakyRelu, LeakyReLU, Linear, LogSoftmax, MaxPool1d, MaxPool2d, MaxPool3d, QuickGelu, Relu, ReLU,
                     Sigmoid, Softmax, Tanh)
from .graph_module import GraphModule
from .losses import CrossEntropyLoss, MSELoss
from .module import Buffer, Module, Parameter, Sequential, trace
from .tensor import GraphBuilder, Tensor

__all__ = ["Module", "Parameter", "Buffer", "Sequential", "trace", "Tensor", "GraphBuilder", "functional", "init",
           "Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
           "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "GlobalAvgPool", "Flatten",
           "Identity", "Relu", "ReLU", "LeakyRelu", "LeakyReLU", "Sigmoid", "Tanh", "QuickGelu", "Softmax", "LogSoftmax", "Dropout",
           "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "CrossEntropyLoss", "MSELoss", "GraphModule"]
