"""Plan and wrap a MoCo-style encoder whose forward writes a feature queue.

The query encoder (six conv blocks with BatchNorm, a projection) feeds a contrast head
that scores each query against its key and against a queue of earlier keys, then
enqueues this batch's keys at a ring pointer (a plain Python int). The key encoder is an
exponential moving average of the query encoder, updated after each step. A native
checkpoint of the contrast head would re-enqueue and advance the pointer on replay, and
score against the *updated* queue; ours replays against the queue as the forward saw it.

``stateaware.auto`` profiles the segments, discovers that the blocks write their BatchNorm
statistics and the head writes rows of the queue and the pointer, plans at a budget,
applies the plan, and training then matches an untouched eager copy byte for byte.

Run: ``python examples/auto_queue.py [--budget 50%] [--steps 3]`` (CPU, ~10-20 s).
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn.functional as F
from torch import nn

import stateaware.auto as auto
from stateaware.planner import evaluate_policy
from stateaware.planner.budget import budget_argument

DIM, QUEUE, TEMPERATURE, MOMENTUM = 64, 512, 0.2, 0.99


def conv_block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class Contrast(nn.Module):
    """Logits of each query against its key and the queue; then the keys are enqueued."""

    def __init__(self, dim: int, size: int, temperature: float):
        super().__init__()
        self.register_buffer("queue", F.normalize(torch.randn(size, dim), dim=1))
        self.ptr = 0
        self.temperature = temperature

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        q = F.normalize(q, dim=1)
        positive = (q * k).sum(1, keepdim=True)
        negative = q @ self.queue.clone().t()
        b = k.shape[0]
        self.queue[self.ptr : self.ptr + b] = k
        self.ptr = (self.ptr + b) % self.queue.shape[0]
        return torch.cat([positive, negative], dim=1) / self.temperature


class Moco(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.query = nn.Sequential(
            conv_block(3, width, 2),
            *(conv_block(width, width, 1) for _ in range(4)),
            conv_block(width, 2 * width, 2),
            nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, DIM)),
        )
        self.key = copy.deepcopy(self.query).requires_grad_(False)
        self.contrast = Contrast(DIM, QUEUE, TEMPERATURE)

    def forward(self, x_q: torch.Tensor, x_k: torch.Tensor) -> torch.Tensor:
        q = self.query(x_q)
        with torch.no_grad():
            k = F.normalize(self.key(x_k), dim=1)
        return self.contrast(q, k)

    @torch.no_grad()
    def momentum_update(self) -> None:
        for pk, pq in zip(self.key.parameters(), self.query.parameters(), strict=True):
            pk.mul_(MOMENTUM).add_(pq, alpha=1 - MOMENTUM)

    def segment_names(self) -> list[str]:
        return [f"query.{i}" for i in range(len(self.query))] + ["contrast"]


def batch(step: int, size: int = 32, image: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(size, 3, image, image, generator=g)
    return x + 0.1 * torch.randn(x.shape, generator=g), x + 0.1 * torch.randn(x.shape, generator=g)


def train(model: Moco, steps: int) -> None:
    optimizer = torch.optim.SGD(model.query.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        x_q, x_k = batch(step)
        logits = model(x_q, x_k)
        loss = F.cross_entropy(logits, torch.zeros(logits.shape[0], dtype=torch.int64))
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()
        model.momentum_update()


def state_of(model: Moco) -> dict[str, object]:
    return {**{k: v.clone() for k, v in model.state_dict().items()}, "contrast.ptr": model.contrast.ptr}


def same(a: dict[str, object], b: dict[str, object]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a
    )


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--budget", default="25%", type=budget_argument, help="bytes with a unit (8GiB) or P%% (default 25%%)"
    )
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # steadier timings on a shared CPU; the bytes do not depend on it
    torch.manual_seed(0)
    model = Moco()
    eager = copy.deepcopy(model)
    example = batch(0)

    card = auto.profile(model, example, segments=model.segment_names(), repeats=2)
    plan = auto.plan(card, args.budget)
    for name, entries in zip(card.provenance["auto"]["segments"], card.provenance["auto"]["state"], strict=True):
        found = ", ".join(f"{e['name']} ({e['write']})" for e in entries) or "nothing"
        print(f"  {name:9s} writes {found}")
    auto.apply(model, plan)
    print(f"plan at {args.budget}: {', '.join(plan.policy)}")

    eager_peak = auto.step_peak_bytes(copy.deepcopy(eager), example)
    planned_peak = auto.step_peak_bytes(copy.deepcopy(model), example)
    eager_model_peak, _ = evaluate_policy(card, ("eager",) * card.n_segments)
    torch.manual_seed(1)
    train(eager, args.steps)
    eager_rng = torch.get_rng_state()
    torch.manual_seed(1)
    train(model, args.steps)
    identical = same(state_of(eager), state_of(model)) and torch.equal(eager_rng, torch.get_rng_state())
    print(
        f"peak/eager: measured {planned_peak / eager_peak:.3f}, predicted "
        f"{plan.predicted_peak_bytes / eager_model_peak:.3f}\n"
        f"  (measured {planned_peak} B vs eager {eager_peak} B; predicted {plan.predicted_peak_bytes} B)"
    )
    print(f"after {args.steps} steps: parameters, buffers, queue and pointer equal eager's byte for byte: {identical}")
    return {
        "identical": identical,
        "policy": plan.policy,
        "measured_ratio": planned_peak / eager_peak,
        "predicted_ratio": plan.predicted_peak_bytes / eager_model_peak,
    }


if __name__ == "__main__":
    main()
