"""Plan and wrap torchvision's ResNet-18 (BatchNorm everywhere) under a memory budget.

Each of the eight BasicBlocks is a segment. ``stateaware.auto`` measures what every
option costs per block on this machine, finds that each block writes its BatchNorm
running statistics, chooses per block eager / recompute with the statistics preserved
(``whole``, or ``offload`` to host memory) at the budget, and applies the choice in place.
Training the applied model then gives an untouched eager copy's parameters and buffers
byte for byte (torch's checkpoint would update every running statistic twice per step).

Run: ``python examples/auto_resnet.py [--budget 25%] [--steps 2]`` (CPU, 32x32 images).
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn.functional as F

import stateaware.auto as auto
from stateaware.planner import evaluate_policy
from stateaware.planner.budget import budget_argument

SEGMENTS = [f"layer{i}.{j}" for i in range(1, 5) for j in range(2)]


def build(seed: int = 0) -> torch.nn.Module:
    from torchvision.models import resnet18  # only here: the library never needs torchvision

    torch.manual_seed(seed)
    return resnet18(num_classes=10)


def batch(step: int, size: int = 16, image: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2000 + step)
    return torch.randn(size, 3, image, image, generator=g), torch.randint(0, 10, (size,), generator=g)


def train(model: torch.nn.Module, steps: int) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for step in range(steps):
        x, y = batch(step)
        optimizer.zero_grad(set_to_none=False)
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


def same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--budget", default="25%", type=budget_argument, help="bytes with a unit (8GiB) or P%% (default 25%%)"
    )
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # steadier timings on a shared CPU; the bytes do not depend on it
    model = build()
    eager = copy.deepcopy(model)
    example = (batch(0)[0],)

    card = auto.profile(model, example, segments=SEGMENTS, repeats=1)
    plan = auto.plan(card, args.budget)
    auto.apply(model, plan)
    written = sum(len(s) for s in card.provenance["auto"]["state"])
    print(f"discovered {written} written buffers in {card.n_segments} blocks (BatchNorm statistics)")
    print(f"plan at {args.budget}: {', '.join(plan.policy)}")

    eager_peak = auto.step_peak_bytes(copy.deepcopy(eager), example)
    planned_peak = auto.step_peak_bytes(copy.deepcopy(model), example)
    eager_model_peak, _ = evaluate_policy(card, ("eager",) * card.n_segments)
    torch.manual_seed(1)
    train(eager, args.steps)
    torch.manual_seed(1)
    train(model, args.steps)
    identical = same(eager, model)
    print(
        f"peak/eager: measured {planned_peak / eager_peak:.3f}, predicted "
        f"{plan.predicted_peak_bytes / eager_model_peak:.3f}\n"
        f"  (measured {planned_peak} B vs eager {eager_peak} B; predicted {plan.predicted_peak_bytes} B)"
    )
    print(f"after {args.steps} steps: parameters and buffers equal eager's byte for byte: {identical}")
    return {
        "identical": identical,
        "policy": plan.policy,
        "measured_ratio": planned_peak / eager_peak,
        "predicted_ratio": plan.predicted_peak_bytes / eager_model_peak,
    }


if __name__ == "__main__":
    main()
