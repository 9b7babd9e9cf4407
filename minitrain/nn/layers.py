"""Layers: Linear, convolutions and their transposes (1-3D), pooling, activations, Flatten,
Dropout and BatchNorm.  Parameters are initialised as PyTorch initialises them (Kaiming
uniform with a = sqrt(5) for weights, U(+-1/sqrt(fan_in)) for biases) and named `weight` and
`bias`; BatchNorm also holds the buffers `running_mean` and `running_var`."""
from __future__ import annotations

import math

import numpy as np

from . import functional as F
from . import init
from .module import Buffer, Module, Parameter


class Identity(Module):
    def forward(self, x):
        return x


class Linear(Module):
    """y = x W^T + b, W of shape (out_features, in_features)."""

    def __init__(self, in_features, out_features, bias=True, dtype=np.float32):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(init.kaiming_uniform((out_features, in_features), in_features, dtype=dtype))
        self.bias = Parameter(init.bias_uniform((out_features,), in_features, dtype)) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"{self.in_features}, {self.out_features}, bias={self.bias is not None}"


class _ConvNd(Module):
    """Shared by Conv{1,2,3}d and ConvTranspose{1,2,3}d."""
    ndim = 2
    transposed = False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, output_padding=0, dtype=np.float32):
        super().__init__()
        n = self.ndim
        if not isinstance(groups, int) or groups < 1:
            raise ValueError(f"{type(self).__name__}: groups must be an int >= 1, got {groups!r}")
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{type(self).__name__}: in_channels {in_channels} and out_channels {out_channels} "
                             f"must be divisible by groups {groups}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = F.spatial(kernel_size, n, "kernel_size")
        self.stride, self.padding, self.dilation = stride, padding, dilation
        self.output_padding = output_padding
        if self.transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
            fan_in = (out_channels // groups) * math.prod(self.kernel_size)   # as PyTorch computes it
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
            fan_in = (in_channels // groups) * math.prod(self.kernel_size)
        self.weight = Parameter(init.kaiming_uniform(shape, fan_in, dtype=dtype))
        self.bias = Parameter(init.bias_uniform((out_channels,), fan_in, dtype)) if bias else None

    def forward(self, x):
        return F.conv(x, self.weight, self.bias, stride=self.stride, padding=self.padding,
                      dilation=self.dilation, groups=self.groups, transposed=self.transposed,
                      output_padding=self.output_padding)

    def extra_repr(self):
        """PyTorch's printout: the settings that differ from the defaults."""
        text = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        for name, default in (("padding", 0), ("dilation", 1), ("output_padding", 0), ("groups", 1)):
            if getattr(self, name) != default:
                text += f", {name}={getattr(self, name)}"
        return text + (", bias=False" if self.bias is None else "")


def _conv_class(name, ndim, transposed):
    doc = (f"{ndim}-D {'transposed ' if transposed else ''}convolution over (N, C, {'L' if ndim == 1 else 'spatial'}) "
           f"input; weight ({'C_in, C_out/groups' if transposed else 'C_out, C_in/groups'}, *kernel_size).")
    return type(name, (_ConvNd,), {"ndim": ndim, "transposed": transposed, "__doc__": doc})


Conv1d, Conv2d, Conv3d = (_conv_class(f"Conv{n}d", n, False) for n in (1, 2, 3))
ConvTranspose1d, ConvTranspose2d, ConvTranspose3d = (_conv_class(f"ConvTranspose{n}d", n, True) for n in (1, 2, 3))


class _MaxPoolNd(Module):
    ndim = 2

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    def forward(self, x):
        return F.max_pool(x, self.ndim, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode)

    def extra_repr(self):
        stride = self.kernel_size if self.stride is None else self.stride
        return (f"kernel_size={self.kernel_size}, stride={stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class _AvgPoolNd(Module):
    ndim = 2

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x):
        return F.avg_pool(x, self.ndim, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad)

    def extra_repr(self):
        stride = self.kernel_size if self.stride is None else self.stride
        return (f"kernel_size={self.kernel_size}, stride={stride}, padding={self.padding}, "
                f"ceil_mode={self.ceil_mode}, count_include_pad={self.count_include_pad}")


MaxPool1d, MaxPool2d, MaxPool3d = (type(f"MaxPool{n}d", (_MaxPoolNd,), {"ndim": n, "__doc__": f"{n}-D max pooling."})
                                   for n in (1, 2, 3))
AvgPool1d, AvgPool2d, AvgPool3d = (type(f"AvgPool{n}d", (_AvgPoolNd,), {"ndim": n, "__doc__": f"{n}-D average pooling."})
                                   for n in (1, 2, 3))


class GlobalAvgPool(Module):
    """Mean over every spatial dim; flatten=True also drops them: (N, C, ...) -> (N, C)."""

    def __init__(self, flatten=False):
        super().__init__()
        self.flatten = flatten

    def forward(self, x):
        y = F.global_avg_pool(x)
        return F.flatten(y) if self.flatten else y

    def extra_repr(self):
        return f"flatten={self.flatten}"


class Flatten(Module):
    """(N, d1, d2, ...) -> (N, d1 * d2 * ...) (from start_dim on)."""

    def __init__(self, start_dim=1):
        super().__init__()
        self.start_dim = start_dim

    def forward(self, x):
        return F.flatten(x, self.start_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}"


class Relu(Module):
    def forward(self, x):
        return F.relu(x)


class LeakyRelu(Module):
    def __init__(self, negative_slope=0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}"


ReLU, LeakyReLU = Relu, LeakyRelu      # PyTorch's spellings


class Sigmoid(Module):
    def forward(self, x):
        return F.sigmoid(x)


class Tanh(Module):
    def forward(self, x):
        return F.tanh(x)


class QuickGelu(Module):
    def __init__(self, alpha=1.702):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return F.quick_gelu(x, self.alpha)

    def extra_repr(self):
        return f"alpha={self.alpha}"


class Softmax(Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.softmax(x, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x):
        return F.log_softmax(x, self.dim)


class Dropout(Module):
    """Zero each element with probability p while training (scaling the rest by 1/(1-p));
    the identity in inference graphs."""

    def __init__(self, p=0.5):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p!r}")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p)

    def extra_repr(self):
        return f"p={self.p}"


class _BatchNormNd(Module):
    """Batch normalisation with PyTorch's conventions: momentum 0.1 weights the new batch
    statistics in the running averages (the op's ONNX momentum is 1 - momentum).  As in ONNX,
    running_var averages the biased batch variance (PyTorch: unbiased, larger by M/(M-1) for
    M values per channel)."""
    ranks = (4,)

    def __init__(self, num_features, eps=1e-5, momentum=0.1, dtype=np.float32):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.weight = Parameter(np.ones(num_features, dtype))
        self.bias = Parameter(np.zeros(num_features, dtype))
        self.running_mean = Buffer(np.zeros(num_features, dtype))
        self.running_var = Buffer(np.ones(num_features, dtype))

    def forward(self, x):
        if x.ndim is not None and x.ndim not in self.ranks:
            raise ValueError(f"{type(self).__name__} expects input of rank {' or '.join(map(str, self.ranks))}, "
                             f"got shape {x.shape}")
        return F.batch_norm(x, self)

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"


BatchNorm1d = type("BatchNorm1d", (_BatchNormNd,), {"ranks": (2, 3), "__doc__": "BatchNorm over (N, C) or (N, C, L)."})
BatchNorm2d = type("BatchNorm2d", (_BatchNormNd,), {"ranks": (4,), "__doc__": "BatchNorm over (N, C, H, W)."})
BatchNorm3d = type("BatchNorm3d", (_BatchNormNd,), {"ranks": (5,), "__doc__": "BatchNorm over (N, C, D, H, W)."})
