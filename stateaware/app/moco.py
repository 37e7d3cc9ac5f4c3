"""Query/momentum encoders, the FP32 negative queue and one training step per method.

Strict execution (NOTE [ Strict enqueue ]) writes the step's keys into the queue inside
the forward, in the contrast segment that also reads the queue for the negative logits.
Each method runs the same arithmetic; they differ only in what autograd keeps and what a
replay must restore:

==============  ==================================================================
``eager``       every segment eager; strict enqueue (no recompute).
``whole``       every segment checkpointed, declared state preserved whole.
``regions``     every segment checkpointed, the queue as ``Region(queue, rows)`` (the
                enqueue rows); BatchNorm buffers whole (every element is written), so
                its policy is ``whole`` for the encoder segments and ``region`` last.
``functional``  every segment checkpointed; the queue is kept out of place (the contrast
                segment returns the next queue version, rebound after the step) and is
                not declared; BatchNorm buffers are declared whole.
``deferred``    every segment eager; the enqueue runs after backward and the update.
``agnostic``    per-segment policy from the state-agnostic planner.
``joint``       per-segment policy from the joint planner.
==============  ==================================================================

NOTE [ Strict enqueue ]
    The contrast segment computes ``l_neg = q @ copy(queue)^T`` and then writes the keys
    into rows ``rows`` of the queue. Eager autograd keeps the copy. A recomputing method
    discards it, and a replay at backward would copy the *enqueued* queue — so the
    queue is state the replay must see as the forward saw it. No later write reaches the
    queue before the step's backward ends, so the region rows are exactly the enqueue
    rows (paper §3.1). BatchNorm running statistics are the encoder segments' state: a
    replay would update them a second time unless they are restored.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from stateaware.app.model import SEGMENTS, cifar_resnet18, encoder_segments, l2_normalize
from stateaware.app.protocol import METHODS  # the seven methods, in the order records and Table 9 list them
from stateaware.torch_replay import Region, checkpoint

__all__ = [
    "cross_entropy",
    "METHODS",
    "OPTIONS",
    "FIXED",
    "PLANNED",
    "Moco",
    "build",
    "contrast",
    "queue_rows",
    "momentum_update",
    "train_step",
    "fixed_policy",
    "n_segments",
    "persistent_bytes",
]


#: Per-segment options (profile-card names).
OPTIONS = ("eager", "whole", "region")

#: Methods with one option for every segment.
FIXED = {"eager": "eager", "whole": "whole", "regions": "region", "deferred": "eager"}

#: Methods whose policy a planner chooses (planner names of ``stateaware.planner``).
PLANNED = {"agnostic": "agnostic", "joint": "joint"}


@dataclass
class Moco:
    """Live state of one training run."""

    query: nn.Module
    key: nn.Module
    segments: list[nn.Module]  # the query encoder's segments (share its tensors)
    queue: torch.Tensor  # (K, D) FP32, L2-normalised rows
    temperature: float
    momentum: float

    @property
    def queue_size(self) -> int:
        return int(self.queue.shape[0])


def n_segments() -> int:
    """Encoder segments plus the contrast segment."""
    return len(SEGMENTS) + 1


def build(
    seed: int,
    *,
    width: int,
    dim: int,
    queue_size: int,
    temperature: float = 0.2,
    momentum: float = 0.99,
    device: str | torch.device = "cpu",
) -> Moco:
    """Encoders and queue drawn from ``seed`` (the key encoder starts as the query's copy)."""
    torch.manual_seed(int(seed))
    query = cifar_resnet18(dim, width=width).to(device)
    key = copy.deepcopy(query)
    for p in key.parameters():
        p.requires_grad_(False)
    gen = torch.Generator().manual_seed(int(seed) + 1)
    queue = nn.functional.normalize(torch.randn(queue_size, dim, generator=gen), dim=1).to(device)
    return Moco(query, key, encoder_segments(query), queue, float(temperature), float(momentum))


def queue_rows(offset: int, batch: int, queue_size: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """The ring rows that ``batch`` keys enqueue into after ``offset`` keys were enqueued
    (a pure function of the count: no pointer state)."""
    rows = (torch.arange(batch) + int(offset)) % queue_size
    return rows if torch.device(device).type == "cpu" else rows.to(device)


@torch.no_grad()
def momentum_update(m: Moco) -> None:
    """``key = momentum * key + (1 - momentum) * query`` for every parameter."""
    for pk, pq in zip(m.key.parameters(), m.query.parameters(), strict=True):
        pk.mul_(m.momentum).add_(pq.detach(), alpha=1.0 - m.momentum)


class _CrossEntropy(torch.autograd.Function):
    """Mean cross-entropy whose target log-probabilities are gathered rather than passed to
    ``nll_loss``, which has no deterministic CUDA implementation (byte-identical test
    scores need one); the backward scatters ``-grad / N`` into one element per row (no
    accumulation) and applies ``log_softmax``'s backward kernel."""

    @staticmethod
    def forward(ctx, logits, target):  # type: ignore[override]
        out = torch.log_softmax(logits, 1)
        ctx.save_for_backward(logits, target)
        return -out.gather(1, target[:, None]).sum() / logits.shape[0]

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        logits, target = ctx.saved_tensors
        out = torch.log_softmax(logits, 1)
        g = torch.zeros_like(out).scatter_(1, target[:, None], (-grad / logits.shape[0]).expand(len(target), 1))
        return torch.ops.aten._log_softmax_backward_data(g, out, 1, logits.dtype), None


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``logits`` against class indices ``target`` (values as
    ``F.cross_entropy``'s up to summation order), deterministic on CUDA."""
    return _CrossEntropy.apply(logits, target)


def contrast(
    q: torch.Tensor,
    k: torch.Tensor,
    queue: torch.Tensor,
    rows: torch.Tensor,
    temperature: float,
    *,
    enqueue: bool = True,
    functional: bool = False,
):
    """InfoNCE of ``q`` against its key ``k`` and the queue's negatives; strict enqueue.

    Returns the loss (``enqueue``: rows ``rows`` of ``queue`` now hold ``k``), or with
    ``functional=True`` ``(loss, next_queue)`` leaving ``queue`` untouched.
    """
    negatives = queue.clone()  # what eager keeps; the enqueue below overwrites the queue
    l_pos = (q * k).sum(1, keepdim=True)
    l_neg = q @ negatives.t()
    logits = torch.cat([l_pos, l_neg], dim=1) / temperature
    loss = cross_entropy(logits, torch.zeros(q.shape[0], dtype=torch.long, device=q.device))
    if functional:
        return loss, queue.index_copy(0, rows, k)
    if enqueue:
        with torch.no_grad():
            queue.index_copy_(0, rows, k)
    return loss


def fixed_policy(method: str) -> tuple[str, ...]:
    """The per-segment options of a method that has one (all but the planned ones)."""
    if method == "functional":
        return ("whole",) * n_segments()
    if method not in FIXED:
        raise ValueError(
            f"method {method!r} has no fixed policy; fixed-policy methods are: {', '.join((*FIXED, 'functional'))}"
        )
    if method == "regions":
        # Only the queue has declared rows; BatchNorm buffers are written whole, so a region
        # of them is the whole buffer (the card has no region option there).
        return ("whole",) * (n_segments() - 1) + ("region",)
    return (FIXED[method],) * n_segments()


def _segment(seg: nn.Module, h: torch.Tensor, option: str) -> torch.Tensor:
    if option == "eager":
        return seg(h)
    if option in ("whole", "region"):
        # A module's buffers have no declared rows: "region" preserves them whole.
        return checkpoint(seg, h, state=[seg], preserve=option)
    raise ValueError(f"option {option!r}; valid options are: {', '.join(OPTIONS)}")


def train_step(
    m: Moco,
    optimizer: torch.optim.Optimizer,
    x_q: torch.Tensor,
    x_k: torch.Tensor,
    step: int,
    method: str,
    policy: Sequence[str],
    *,
    offset: int | None = None,
) -> float:
    """One strict (or deferred) MoCo step under ``method`` with per-segment ``policy``.

    ``policy`` has one option per segment (encoder segments, then contrast); it is
    ignored where the method fixes the execution (``functional``, ``deferred``).
    ``offset`` is the number of keys enqueued before this step (default ``step * batch``,
    right when every batch is full).
    Returns the loss. Every method leaves the same bytes in parameters, buffers and queue.
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r}; valid methods are: {', '.join(METHODS)}")
    if len(policy) != n_segments():
        raise ValueError(f"policy has {len(policy)} entries; the encoder has {n_segments()} segments")
    momentum_update(m)
    with torch.no_grad():
        k = l2_normalize(m.key(x_k))
    batch = x_q.shape[0]
    rows = queue_rows(step * batch if offset is None else offset, batch, m.queue_size, m.queue.device)
    h = x_q
    for seg, option in zip(m.segments, policy[:-1], strict=True):
        h = _segment(seg, h, option)
    last = policy[-1]
    if method == "functional":
        loss, next_queue = checkpoint(contrast, h, k, m.queue, rows, m.temperature, functional=True)
    elif method == "deferred":
        loss = contrast(h, k, m.queue, rows, m.temperature, enqueue=False)
    elif last == "eager":
        loss = contrast(h, k, m.queue, rows, m.temperature)
    elif last == "whole":
        loss = checkpoint(contrast, h, k, m.queue, rows, m.temperature, state=[m.queue], preserve="whole")
    elif last == "region":
        loss = checkpoint(
            contrast, h, k, m.queue, rows, m.temperature, state=[Region(m.queue, rows)], preserve="region"
        )
    else:
        raise ValueError(f"policy[-1]={last!r}; valid options are: {', '.join(OPTIONS)}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if method == "functional":
        m.queue = next_queue.detach()
    elif method == "deferred":
        with torch.no_grad():
            m.queue.index_copy_(0, rows, k)
    return float(loss.detach())


def persistent_bytes(m: Moco, optimizer: torch.optim.Optimizer) -> int:
    """Bytes live through every step: both encoders, gradients, optimizer state, queue."""
    seen: dict[int, int] = {}
    tensors = [*m.query.parameters(), *m.query.buffers(), *m.key.parameters(), *m.key.buffers(), m.queue]
    grads = sum(p.numel() * p.element_size() for p in m.query.parameters())  # one gradient per parameter
    for st in optimizer.state.values():
        tensors += [v for v in st.values() if isinstance(v, torch.Tensor)]
    for t in tensors:
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values()) + grads
