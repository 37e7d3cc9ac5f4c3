"""Generated stateful models for the ``stateaware.auto`` tests, examples and bench.

Each model is a chain of blocks (Linear, then any of BatchNorm, ReLU, Dropout) with the
state-writing modules the field uses placed among them: a ring feature queue with a
Python int pointer (``RingQueue``) and an exponential moving average buffer (``EmaCenter``).
"""

from __future__ import annotations

import random

import torch
from torch import nn


class RingQueue(nn.Module):
    """MoCo's queue: logits against the queue as it was, then the batch enqueued at ``ptr``."""

    def __init__(self, size: int, dim: int):
        super().__init__()
        self.register_buffer("queue", torch.randn(size, dim))
        self.ptr = 0  # a plain Python int, advanced by every forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = x @ self.queue.clone().t()
        b = x.shape[0]
        self.queue[self.ptr : self.ptr + b] = x.detach()
        self.ptr = (self.ptr + b) % self.queue.shape[0]
        return torch.cat([x, logits[:, : x.shape[1]]], dim=1)[:, : x.shape[1]] + logits.mean(1, keepdim=True)


class EmaCenter(nn.Module):
    """DINO's center: subtract a running mean of the batch, then update it in place."""

    def __init__(self, dim: int, momentum: float = 0.9):
        super().__init__()
        self.register_buffer("center", torch.zeros(dim))
        self.momentum = momentum

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.tanh(x - self.center)
        with torch.no_grad():
            self.center.mul_(self.momentum).add_(x.mean(0), alpha=1 - self.momentum)
        return out


def block(width: int, rng: random.Random) -> nn.Sequential:
    # ReLU last: it saves its output for backward, so the block's output outlives the next
    # segment's forward whatever that segment saves (as in a ResNet block), which is what the
    # card's model assumes of a segment's input (its producer's retained bytes).
    layers: list[nn.Module] = [nn.Linear(width, width)]
    if rng.random() < 0.6:
        layers.append(nn.BatchNorm1d(width))
    if rng.random() < 0.5:
        layers.append(nn.Dropout(0.1))
    layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Named(nn.Module):
    """The same chain as attributes of a custom module, run by its own forward."""

    def __init__(self, parts: list[nn.Module]):
        super().__init__()
        self.stem = parts[0]
        self.body = nn.ModuleList(parts[1:-1])
        self.head = parts[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for part in self.body:
            x = part(x)
        return self.head(x)

    def segment_names(self) -> list[str]:
        return ["stem", *[f"body.{i}" for i in range(len(self.body))], "head"]


def generated(seed: int, *, width: int = 256, blocks: int = 6, queue: int = 1024, named: bool = False) -> nn.Module:
    """A chain of ``blocks`` blocks with an EMA center among them and a ring queue after
    them (where MoCo's contrast sits), then a linear head."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    parts: list[nn.Module] = [block(width, rng) for _ in range(blocks)]
    parts.insert(rng.randrange(1, blocks), EmaCenter(width))
    parts.append(RingQueue(queue, width))
    parts.append(nn.Linear(width, width))
    return Named(parts) if named else nn.Sequential(*parts)
