"""A profile card of the query encoder's segments (``stateaware.commands.encoder_card`` freezes it).

Per segment (the six encoder segments, then the contrast segment) the card lists
``eager`` and ``whole``, and for the contrast segment ``region`` (the enqueue rows); an
encoder segment has no region option — every element of its BatchNorm buffers is written,
so a region would be the whole buffer. Costs (paper eq. 3):

* bytes are *counted*, not measured: ``retained_bytes`` of ``eager`` is the distinct
  storage the segment saves for backward (parameters and the segment's input excluded:
  every option keeps those); a recomputing option retains its preserved state (whole
  copy, or rows plus their int64 index) and needs, while its backward runs, the
  recomputed saved tensors plus one more copy of the preserved state (``temp_bytes``);
* ``ms`` is measured: the median of ``repeats`` eager forwards of the segment, doubled
  for a recomputing option, plus the measured preservation copy (``state_ms``).

``provenance`` says so, so the card is never mistaken for an allocator measurement.
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any

import torch

from stateaware.app import moco
from stateaware.app.moco import Moco, contrast, n_segments, persistent_bytes, queue_rows
from stateaware.app.model import l2_normalize
from stateaware.cost_runtime.measure import synchronize
from stateaware.planner.profile_card import card_from_dict

__all__ = ["profile_card", "profile_protocol"]


def _saved_bytes(fn, exclude: set[int]) -> int:
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        s = t.untyped_storage()
        if s.data_ptr() not in exclude:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    del out
    return sum(seen.values())


def _median_ms(fn, repeats: int, device: torch.device) -> float:
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    return float(statistics.median(times))


def profile_card(
    m: Moco,
    optimizer: torch.optim.Optimizer,
    x_q: torch.Tensor,
    x_k: torch.Tensor,
    *,
    repeats: int = 3,
    provenance: dict[str, Any] | None = None,
) -> Any:
    """The card of ``m``'s segments for a batch like ``x_q`` (``m`` is left as it was)."""
    device = x_q.device
    params = {p.untyped_storage().data_ptr() for p in m.query.parameters()}
    snapshot = {k: v.clone() for k, v in m.query.state_dict().items()}
    queue = m.queue.clone()
    with torch.no_grad():
        k = l2_normalize(m.key(x_k))
    rows = queue_rows(0, x_q.shape[0], m.queue_size, device)
    segments: list[dict[str, Any]] = []
    h = x_q.detach()
    for seg in m.segments:
        exclude = params | {h.untyped_storage().data_ptr()}
        r = _saved_bytes(functools.partial(seg, h), exclude)
        ms = _median_ms(functools.partial(seg, h), repeats, device)
        buffers = list(seg.buffers())
        state = sum(b.numel() * b.element_size() for b in buffers)
        copy_ms = _median_ms(lambda: [b.clone() for b in buffers], repeats, device)  # noqa: B023 (timed at once)
        segments.append(
            {
                "eager": {"retained_bytes": r, "temp_bytes": 0, "ms": ms},
                "whole": {
                    "retained_bytes": state,
                    "temp_bytes": r + state,
                    "ms": 2 * ms + copy_ms,
                    "state_retained_bytes": state,
                    "state_temp_bytes": state,
                    "state_ms": copy_ms,
                },
            }
        )
        with torch.no_grad():
            h = seg(h)
    h = h.detach().requires_grad_(True)
    scratch = m.queue.clone()
    exclude = {h.untyped_storage().data_ptr()}
    r = _saved_bytes(lambda: contrast(h, k, scratch, rows, m.temperature), exclude)
    ms = _median_ms(lambda: contrast(h, k, scratch, rows, m.temperature), repeats, device)
    whole = m.queue.numel() * m.queue.element_size()
    region = rows.numel() * (m.queue.shape[1] * m.queue.element_size() + 8)
    whole_ms = _median_ms(lambda: scratch.clone(), repeats, device)
    region_ms = _median_ms(lambda: scratch.index_select(0, rows), repeats, device)
    segments.append(
        {
            "eager": {"retained_bytes": r, "temp_bytes": 0, "ms": ms},
            "whole": {
                "retained_bytes": whole,
                "temp_bytes": r + whole,
                "ms": 2 * ms + whole_ms,
                "state_retained_bytes": whole,
                "state_temp_bytes": whole,
                "state_ms": whole_ms,
            },
            "region": {
                "retained_bytes": region,
                "temp_bytes": r + region,
                "ms": 2 * ms + region_ms,
                "state_retained_bytes": region,
                "state_temp_bytes": region,
                "state_ms": region_ms,
            },
        }
    )
    # Profiling ran training-mode forwards: put the BatchNorm statistics and queue back.
    m.query.load_state_dict(snapshot)
    m.queue.copy_(queue)
    if len(segments) != n_segments():
        raise RuntimeError(f"profiled {len(segments)} segments; the encoder has {n_segments()}")
    doc = {
        "persistent_bytes": persistent_bytes(m, optimizer),
        "segments": segments,
        "provenance": {
            "workload": "cifar",
            "bytes": "counted (saved tensors, declared state)",
            "ms": f"measured, median of {repeats} forwards",
            "batch": int(x_q.shape[0]),
            "image": list(x_q.shape[1:]),
            "device": str(device),
            **(provenance or {}),
        },
    }
    return card_from_dict(doc)


def profile_protocol(
    proto: Any,
    *,
    seed: int,
    device: str | torch.device = "cpu",
    repeats: int = 3,
    provenance: dict[str, Any] | None = None,
) -> Any:
    """The card of a fresh model of ``proto`` (a ``stateaware.app.protocol.Protocol``) on a
    seeded random batch of its shape: the costs depend on shapes, not on the images."""
    m = moco.build(
        seed,
        width=proto.width,
        dim=proto.dim,
        queue_size=proto.queue_size,
        temperature=proto.temperature,
        momentum=proto.momentum,
        device=device,
    )
    optimizer = torch.optim.SGD(m.query.parameters(), lr=proto.lr, momentum=0.9)
    gen = torch.Generator().manual_seed(int(seed))
    shape = (proto.batch, 3, proto.image, proto.image)
    x_q = torch.randn(shape, generator=gen).to(device)
    x_k = torch.randn(shape, generator=gen).to(device)
    return profile_card(m, optimizer, x_q, x_k, repeats=repeats, provenance=provenance)


if __name__ == "__main__":  # the tool lives with the other command lines
    from stateaware.commands.encoder_card import main

    raise SystemExit(main())
