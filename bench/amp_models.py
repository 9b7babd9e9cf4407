"""The two networks bench/amp.py adds to the case table's LeNet-5 and 1D CNN, each built in
minitrain.nn and in torch.nn from one description, so that the two share their parameter names
and the torch copy takes the minitrain model's initial weights by name:

* vgg_bn: a VGG-style CNN on 3x32x32 (CIFAR-sized) inputs: three stages of two 3x3 convolutions
  (64, 128, 256 channels, no bias) each followed by BatchNorm and ReLU, every stage closed by a
  2x2 max pool, then a linear classifier over the 256x4x4 features;
* resnet_small: a small ResNet on 3x32x32: a 3x3 stem (32 channels, BatchNorm, ReLU) and three
  basic blocks of 32, 64 and 128 channels (the last two with stride 2 and a 1x1 projection
  shortcut with BatchNorm), global average pooling and a linear classifier.

Each framework is reached through a small `Layers` table (its module base class, layer
constructors and functional ReLU); the architectures are written once against it.
"""
from __future__ import annotations

from dataclasses import dataclass

from minitrain import nn as mnn
from minitrain.nn import functional as F


@dataclass(frozen=True)
class Network:
    """A benchmark network: what cases.make_inputs needs (kind, input_shape, num_classes) and
    the SGD learning rate, like cases.ModelCase; `architecture` names its builder."""
    name: str
    input_shape: tuple  # (N, C, H, W)
    num_classes: int
    architecture: str
    lr: float = 0.01
    kind: str = "model"

    @property
    def batch(self) -> int:
        return self.input_shape[0]


NETWORKS = (Network("vgg_bn_b512", (512, 3, 32, 32), 10, "vgg_bn"),
            Network("resnet_small_b512", (512, 3, 32, 32), 10, "resnet_small"))


@dataclass(frozen=True)
class Layers:
    """One framework's building blocks, with the arguments the architectures use."""
    Module: type
    Sequential: type
    conv: object        # (in, out, kernel, stride, padding) -> a 2D convolution without bias
    batch_norm: object  # (channels) -> BatchNorm2d
    relu: object        # () -> a ReLU layer
    relu_fn: object     # tensor -> relu(tensor)
    max_pool: object    # () -> a 2x2 max pool
    global_pool: object  # () -> (N, C, H, W) -> (N, C)
    flatten: object     # () -> (N, ...) -> (N, features)
    linear: object      # (in, out) -> Linear with bias


def minitrain_layers():
    return Layers(mnn.Module, mnn.Sequential,
                  lambda i, o, k, s, p: mnn.Conv2d(i, o, k, stride=s, padding=p, bias=False),
                  mnn.BatchNorm2d, mnn.Relu, F.relu, lambda: mnn.MaxPool2d(2),
                  lambda: mnn.GlobalAvgPool(flatten=True), mnn.Flatten, mnn.Linear)


def torch_layers(torch):
    tnn = torch.nn
    return Layers(tnn.Module, tnn.Sequential,
                  lambda i, o, k, s, p: tnn.Conv2d(i, o, k, stride=s, padding=p, bias=False),
                  tnn.BatchNorm2d, tnn.ReLU, torch.relu, lambda: tnn.MaxPool2d(2),
                  lambda: tnn.Sequential(tnn.AdaptiveAvgPool2d(1), tnn.Flatten()), tnn.Flatten, tnn.Linear)


def vgg_bn(layers, in_channels, num_classes, spatial):
    """Three stages of (conv 3x3, BatchNorm, ReLU) x 2 and a 2x2 max pool, then Linear."""
    body, channels = [], in_channels
    for width in (64, 128, 256):
        for _ in range(2):
            body += [layers.conv(channels, width, 3, 1, 1), layers.batch_norm(width), layers.relu()]
            channels = width
        body.append(layers.max_pool())
    features = channels * (spatial // 8) ** 2
    return layers.Sequential(*body, layers.flatten(), layers.linear(features, num_classes))


def _basic_block_class(layers):
    """ResNet's basic block (two 3x3 conv + BatchNorm, identity or 1x1 projection shortcut) on
    the framework's Module base class."""
    class BasicBlock(layers.Module):
        def __init__(self, in_channels, out_channels, stride):
            super().__init__()
            self.conv1 = layers.conv(in_channels, out_channels, 3, stride, 1)
            self.bn1 = layers.batch_norm(out_channels)
            self.conv2 = layers.conv(out_channels, out_channels, 3, 1, 1)
            self.bn2 = layers.batch_norm(out_channels)
            self.shortcut = None
            if stride != 1 or in_channels != out_channels:
                self.shortcut = layers.Sequential(layers.conv(in_channels, out_channels, 1, stride, 0),
                                                  layers.batch_norm(out_channels))

        def forward(self, x):
            y = layers.relu_fn(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return layers.relu_fn(y + (x if self.shortcut is None else self.shortcut(x)))
    return BasicBlock


def resnet_small(layers, in_channels, num_classes, spatial):
    """Stem (conv 3x3 to 32, BatchNorm, ReLU), basic blocks 32, 64/2, 128/2, pool, Linear."""
    block = _basic_block_class(layers)
    return layers.Sequential(layers.conv(in_channels, 32, 3, 1, 1), layers.batch_norm(32), layers.relu(),
                             block(32, 32, 1), block(32, 64, 2), block(64, 128, 2),
                             layers.global_pool(), layers.linear(128, num_classes))


ARCHITECTURES = {"vgg_bn": vgg_bn, "resnet_small": resnet_small}


def _build(layers, net):
    _, channels, height, width = net.input_shape
    if height != width:
        raise ValueError(f"{net.name}: square inputs expected, got {net.input_shape}")
    return ARCHITECTURES[net.architecture](layers, channels, net.num_classes, height)


def minitrain_network(net):
    """The network in minitrain.nn (minitrain's initialisation; seed minitrain.random first)."""
    return _build(minitrain_layers(), net)


def torch_network(torch, net, model):
    """The network in torch.nn with every parameter and buffer of the minitrain `model` copied
    in by name; a name on one side only (torch's num_batches_tracked aside) is a ValueError."""
    tmodel = _build(torch_layers(torch), net)
    ours = dict(model.named_state())
    theirs = {k: v for k, v in tmodel.state_dict().items() if not k.endswith("num_batches_tracked")}
    if set(ours) != set(theirs):
        raise ValueError(f"{net.name}: parameter names differ: minitrain only {sorted(set(ours) - set(theirs))}, "
                         f"torch only {sorted(set(theirs) - set(ours))}")
    with torch.no_grad():
        for name, value in ours.items():
            theirs[name].copy_(torch.from_numpy(value.data))
    return tmodel
