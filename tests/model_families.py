"""Small PyTorch models of the CNN families people export (tests/test_model_families.py trains
them from their ONNX files beside PyTorch; bench/model_families.py times their training steps).

ResNet (BatchNorm, residual adds), MobileNetV2 (ReLU6, depthwise convs, inverted residuals),
MobileNetV3 (HardSwish, squeeze-excitation with HardSigmoid), ShuffleNet (chunk, channel shuffle
by Reshape/Transpose), DenseNet (Concat of every earlier feature map), SqueezeNet (fire modules:
Concat of two expand convs), U-Net (ConvTranspose and Resize upsampling, Concat skips, a
per-pixel output) and ConvNeXt (depthwise conv, channel-last LayerNorm, Gelu, layer scale): a
few of each family's characteristic blocks, on 3-channel images of any size divisible by 4."""
import torch

tnn = torch.nn
F = torch.nn.functional
CLASSES = 5


def conv_bn(cin, cout, k=3, stride=1, groups=1, act=tnn.ReLU):
    layers = [tnn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), tnn.BatchNorm2d(cout)]
    return tnn.Sequential(*layers, act()) if act else tnn.Sequential(*layers)


class Classifier(tnn.Module):
    """features, then global average pooling and a linear head."""

    def __init__(self, features, channels):
        super().__init__()
        self.features, self.head = features, tnn.Linear(channels, CLASSES)

    def forward(self, x):
        return self.head(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# ------------------------------------------------------------------ ResNet
class BasicBlock(tnn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.body = tnn.Sequential(conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3, act=None))
        self.shortcut = conv_bn(cin, cout, 1, stride, act=None) if stride != 1 or cin != cout else tnn.Identity()

    def forward(self, x):
        return F.relu(self.body(x) + self.shortcut(x))


def resnet():
    return Classifier(tnn.Sequential(conv_bn(3, 8), tnn.MaxPool2d(2), BasicBlock(8, 8, 1), BasicBlock(8, 12, 2)), 12)


# ------------------------------------------------------------------ MobileNetV2 / V3
class InvertedResidual(tnn.Module):
    def __init__(self, cin, cout, expand, stride, act=tnn.ReLU6, se=False):
        super().__init__()
        hidden = cin * expand
        layers = [conv_bn(cin, hidden, 1, act=act), conv_bn(hidden, hidden, 3, stride, groups=hidden, act=act)]
        if se:
            layers.append(SqueezeExcite(hidden))
        layers.append(conv_bn(hidden, cout, 1, act=None))
        self.body = tnn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class SqueezeExcite(tnn.Module):
    def __init__(self, channels):
        super().__init__()
        self.reduce, self.expand = tnn.Conv2d(channels, channels // 2, 1), tnn.Conv2d(channels // 2, channels, 1)

    def forward(self, x):
        return x * F.hardsigmoid(self.expand(F.relu(self.reduce(F.adaptive_avg_pool2d(x, 1)))))


def mobilenet_v2():
    return Classifier(tnn.Sequential(conv_bn(3, 8, stride=2, act=tnn.ReLU6), InvertedResidual(8, 8, 2, 1),
                                     InvertedResidual(8, 12, 2, 2)), 12)


def mobilenet_v3():
    return Classifier(tnn.Sequential(conv_bn(3, 8, stride=2, act=tnn.Hardswish),
                                     InvertedResidual(8, 8, 2, 1, tnn.Hardswish, se=True),
                                     InvertedResidual(8, 12, 2, 2, tnn.Hardswish, se=True)), 12)


# ------------------------------------------------------------------ ShuffleNet
def channel_shuffle(x, groups):
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


class ShuffleUnit(tnn.Module):
    def __init__(self, channels):
        super().__init__()
        half = channels // 2
        self.branch = tnn.Sequential(conv_bn(half, half, 1), conv_bn(half, half, 3, groups=half, act=None),
                                     conv_bn(half, half, 1))

    def forward(self, x):
        kept, changed = x.chunk(2, dim=1)
        return channel_shuffle(torch.cat([kept, self.branch(changed)], 1), 2)


def shufflenet():
    return Classifier(tnn.Sequential(conv_bn(3, 8), ShuffleUnit(8), ShuffleUnit(8)), 8)


# ------------------------------------------------------------------ DenseNet
class DenseLayer(tnn.Module):
    def __init__(self, cin, growth):
        super().__init__()
        self.body = tnn.Sequential(tnn.BatchNorm2d(cin), tnn.ReLU(), tnn.Conv2d(cin, growth, 3, padding=1, bias=False))

    def forward(self, x):
        return torch.cat([x, self.body(x)], 1)


def densenet():
    transition = tnn.Sequential(tnn.BatchNorm2d(12), tnn.ReLU(), tnn.Conv2d(12, 8, 1, bias=False), tnn.AvgPool2d(2))
    return Classifier(tnn.Sequential(tnn.Conv2d(3, 6, 3, padding=1), DenseLayer(6, 3), DenseLayer(9, 3), transition,
                                     DenseLayer(8, 4)), 12)


# ------------------------------------------------------------------ SqueezeNet
class Fire(tnn.Module):
    def __init__(self, cin, squeeze, expand):
        super().__init__()
        self.squeeze = tnn.Conv2d(cin, squeeze, 1)
        self.expand1, self.expand3 = tnn.Conv2d(squeeze, expand, 1), tnn.Conv2d(squeeze, expand, 3, padding=1)

    def forward(self, x):
        s = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.expand1(s)), F.relu(self.expand3(s))], 1)


def squeezenet():
    return Classifier(tnn.Sequential(tnn.Conv2d(3, 8, 3, stride=2), tnn.ReLU(), tnn.MaxPool2d(2, ceil_mode=True),
                                     Fire(8, 4, 6), Fire(12, 4, 6)), 12)


# ------------------------------------------------------------------ U-Net
class UNet(tnn.Module):
    """Two levels; the first upsampling by ConvTranspose, the second by Resize (bilinear)."""

    def __init__(self):
        super().__init__()
        self.enc1, self.enc2, self.bottom = conv_bn(3, 6), conv_bn(6, 8), conv_bn(8, 8)
        self.up2 = tnn.ConvTranspose2d(8, 8, 2, stride=2)
        self.dec2 = conv_bn(16, 6)
        self.dec1 = conv_bn(12, 6)
        self.out = tnn.Conv2d(6, CLASSES, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        b = self.bottom(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(b), e2], 1))
        d1 = self.dec1(torch.cat([F.interpolate(d2, scale_factor=2, mode="bilinear", align_corners=False), e1], 1))
        return self.out(d1)


# ------------------------------------------------------------------ ConvNeXt
class ConvNeXtBlock(tnn.Module):
    def __init__(self, channels):
        super().__init__()
        self.dwconv = tnn.Conv2d(channels, channels, 3, padding=1, groups=channels)
        self.norm = tnn.LayerNorm(channels)
        self.pw1, self.pw2 = tnn.Linear(channels, 2 * channels), tnn.Linear(2 * channels, channels)
        self.gamma = tnn.Parameter(torch.full((channels,), 0.5))

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


def convnext():
    return Classifier(tnn.Sequential(tnn.Conv2d(3, 8, 2, stride=2), ConvNeXtBlock(8), ConvNeXtBlock(8)), 8)


FAMILIES = {"resnet": resnet, "mobilenet_v2": mobilenet_v2, "mobilenet_v3": mobilenet_v3, "shufflenet": shufflenet,
            "densenet": densenet, "squeezenet": squeezenet, "unet": UNet, "convnext": convnext}


def build(family):
    """The family's model, every parameter of equal entries (a norm's ones and zeros, a layer
    scale) and BatchNorm's statistics drawn at random: an eval export merges initializers of
    equal values, and statistics at their defaults would hide whether they are used."""
    torch.manual_seed(0)
    model = FAMILIES[family]()
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 1 and bool(torch.all(p == p.reshape(-1)[0])):
                p.uniform_(0.5, 1.5)
        for m in model.modules():
            if isinstance(m, tnn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model
