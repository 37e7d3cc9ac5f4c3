"""A selective replay: keep the outputs of the expensive ops, recompute the rest.

``checkpoint(fn, *args, context_fn=keep_expensive)`` saves, during the forward, the
outputs of the ops in ``EXPENSIVE_OPS`` (matrix products, convolutions, attention) and
recomputes everything else (norms, activations, dropout, elementwise ops) in the replay:
torch's ``create_selective_checkpoint_contexts`` with that op list, the policy torchtitan
and torch.compile's memory budget start from. The replay still runs inside our
transaction (``stateaware.torch_replay.checkpoint``): declared state is restored around
it, RNG is replayed, undeclared writes are refused, as for a full replay. It retains more
than a full replay (the saved outputs) and recomputes less (only the cheap ops).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import create_selective_checkpoint_contexts

__all__ = ["EXPENSIVE_OPS", "keep_expensive"]


def _ops(*names: str) -> tuple[Any, ...]:
    # Some attention kernels exist only in some builds (cuDNN, the CPU flash kernel).
    return tuple(getattr(torch.ops.aten, name).default for name in names if hasattr(torch.ops.aten, name))


#: The ops whose outputs a selective replay keeps: what costs the most time to recompute
#: per byte kept. ``nn.Linear`` and ``torch.matmul`` reach the dispatcher as these.
EXPENSIVE_OPS: tuple[Any, ...] = _ops(
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "convolution",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
)


def keep_expensive() -> tuple[Any, Any]:
    """A ``context_fn`` for ``checkpoint``: save the outputs of ``EXPENSIVE_OPS``, recompute the rest."""
    return create_selective_checkpoint_contexts(list(EXPENSIVE_OPS))
