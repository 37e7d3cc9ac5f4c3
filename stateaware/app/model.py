"""The CIFAR-adapted ResNet18 and its segments (paper §12).

torchvision's ``resnet18`` with the CIFAR stem: a 3x3, stride-1 first convolution and no
max-pool. ``width`` (64 in the paper) scales every stage (64, 128, 256, 512 at 64) for
the reduced CPU profile; the blocks are torchvision's own ``BasicBlock`` layers (in-place ReLUs
included), rebuilt with ``ResNet._make_layer`` when ``width != 64``.

The query encoder runs as ``SEGMENTS`` — the stem, the four stages and the projection
head — each an ``nn.Module`` whose buffers (BatchNorm running statistics, written during
every training forward) are the segment's declared state.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["SEGMENTS", "Head", "l2_normalize", "cifar_resnet18", "encoder_segments", "feature_dim", "backbone_features"]

#: The query encoder's segment names, in forward order (the contrast segment follows).
SEGMENTS = ("stem", "layer1", "layer2", "layer3", "layer4", "head")


def _pool(x: torch.Tensor) -> torch.Tensor:
    # Global average pool as a mean: CUDA's adaptive_avg_pool2d backward has no
    # deterministic implementation, and byte-identical test scores need one.
    return x.mean((2, 3))


def l2_normalize(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Rows of ``x`` divided by their L2 norm (at least ``eps``): ``F.normalize(x, dim=1)``."""
    return nn.functional.normalize(x, dim=1, eps=eps)


class Head(nn.Module):
    """Global average pool (torchvision's ``avgpool``, as a mean), the projection ``fc`` and
    L2 normalisation."""

    def __init__(self, fc: nn.Linear):
        super().__init__()
        self.fc = fc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return l2_normalize(self.fc(_pool(x)))


def cifar_resnet18(out_dim: int, *, width: int = 64) -> nn.Module:
    """torchvision ResNet18 with a 3x3 stride-1 stem, no max-pool, ``fc`` to ``out_dim``.

    Parameters are drawn from the global torch generator (seed it first).
    """
    # lazy: torchvision (the cifar extra, seconds to import) only when the model is built
    from torchvision.models import resnet18
    from torchvision.models.resnet import BasicBlock

    if width < 1:
        raise ValueError(f"width={width} must be >= 1")
    model = resnet18(num_classes=out_dim)
    if width != 64:
        model.inplanes = width
        model.bn1 = model._norm_layer(width)
        for i, stride in enumerate((1, 2, 2, 2)):
            setattr(model, f"layer{i + 1}", model._make_layer(BasicBlock, width * 2**i, 2, stride=stride))
        model.fc = nn.Linear(width * 8, out_dim)
    model.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    # torchvision's init for the layers replaced above (kaiming conv, unit BatchNorm).
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return model


def feature_dim(model: nn.Module) -> int:
    """Width of the pooled backbone features (the probe's input)."""
    return int(model.fc.in_features)


def encoder_segments(model: nn.Module) -> list[nn.Module]:
    """The modules of ``SEGMENTS`` for ``model`` (sharing its parameters and buffers)."""
    stem = nn.Sequential(model.conv1, model.bn1, model.relu)
    return [stem, model.layer1, model.layer2, model.layer3, model.layer4, Head(model.fc)]


def backbone_features(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Pooled features before the projection ``fc`` (eval/probe use)."""
    for seg in encoder_segments(model)[:-1]:
        x = seg(x)
    return _pool(x)
