"""BatchNorm + dropout under activation checkpointing: native vs transactional replay.

A small classifier whose checkpointed block holds BatchNorm (running statistics: hidden
state the block writes) and dropout (random state) trains a few SGD steps three ways:

* ``plain``: no checkpointing — the reference;
* ``torch``: ``torch.utils.checkpoint.checkpoint(use_reentrant=False)`` — the replay in
  backward runs BatchNorm's forward again, so the running statistics are updated twice
  per step (and ``num_batches_tracked`` counts double);
* ``stateaware``: ``stateaware.torch_replay.checkpoint(..., state=[bn])`` — the replay
  sees the statistics as the forward saw them and the live ones are reinstated, so the
  running statistics, the gradients and the trained weights are byte-identical to plain.

Run: ``python examples/batchnorm_dropout.py`` (CPU, a second or two).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint as torch_checkpoint

from stateaware.torch_replay import checkpoint as stateaware_checkpoint

METHODS = ("plain", "torch", "stateaware")


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(
            nn.Linear(20, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 64), nn.ReLU()
        )
        self.head = nn.Linear(64, 5)

    def forward(self, x: torch.Tensor, method: str) -> torch.Tensor:
        if method == "plain":
            h = self.block(x)
        elif method == "torch":
            h = torch_checkpoint(self.block, x, use_reentrant=False)
        else:
            h = stateaware_checkpoint(self.block, x, state=[self.block])  # its buffers: BN stats
        return self.head(h)


def train(method: str, steps: int = 5, seed: int = 0) -> dict[str, object]:
    """Train ``steps`` SGD steps; the final BN buffers, last gradients and weights."""
    if method not in METHODS:
        raise ValueError(f"method {method!r}; valid methods are: {', '.join(METHODS)}")
    torch.manual_seed(seed)
    net = Net()
    data = torch.randn(steps, 32, 20)
    labels = torch.randint(0, 5, (steps, 32))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    torch.manual_seed(seed + 1)  # the dropout stream, the same for every method
    grads: list[torch.Tensor] = []
    for x, y in zip(data, labels, strict=True):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x, method), y)
        loss.backward()
        grads = [p.grad.clone() for p in net.parameters()]
        opt.step()
    bn = net.block[1]
    return {
        "running_mean": bn.running_mean.clone(),
        "running_var": bn.running_var.clone(),
        "num_batches_tracked": int(bn.num_batches_tracked),
        "grads": grads,
        "weights": [p.detach().clone() for p in net.parameters()],
    }


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Byte-for-byte equality (``torch.equal`` would call -0.0 and 0.0 equal)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.numpy().tobytes() == b.numpy().tobytes()


def main() -> None:
    runs = {m: train(m) for m in METHODS}
    ref = runs["plain"]
    for method in ("torch", "stateaware"):
        r = runs[method]
        stats = same_bytes(r["running_mean"], ref["running_mean"]) and same_bytes(r["running_var"], ref["running_var"])
        grads = all(same_bytes(a, b) for a, b in zip(r["grads"], ref["grads"], strict=True))
        weights = all(same_bytes(a, b) for a, b in zip(r["weights"], ref["weights"], strict=True))
        print(
            f"{method:>10}: num_batches_tracked={r['num_batches_tracked']} (plain {ref['num_batches_tracked']}), "
            f"running stats identical: {stats}, gradients identical: {grads}, weights identical: {weights}"
        )


if __name__ == "__main__":
    main()
