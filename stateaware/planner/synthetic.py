"""Random profile cards for property tests and planner benchmarks — never for results.

Two families:

``"tradeoff"``
    Shaped like the paper's activation-pressure cells (§9): each segment's activations
    ``a`` are retained by eager, recomputed (held as temporary bytes) by both replay
    options; whole replay retains a snapshot of the state buffer, region replay a small
    journal plus expansion workspace; replay pays a repeated forward plus preservation
    time. Every size and time is drawn independently per segment, so the costs are
    distinct integers and the frontier is not artificially small.
``"uniform"``
    Every ``r``, ``q`` and ``c`` drawn independently and uniformly: no structure at all,
    an adversarial case for the frontier's size.
``"blocks"``
    A network of repeated blocks: four ``"tradeoff"`` segment types, each segment a copy
    of one, as when one layer shape repeats down a deep model.

Each option is present with probability ``1 - missing`` (at least one per segment). By
default the cards have the paper's three options; ``options`` including ``"offload"``
adds it (its draws come after the others', so the three-option cards of a seed do not
change): the whole snapshot moved off the device — retained bytes lose it, the replay
holds it as a temporary copy and pays a transfer. ``"selective"`` is drawn after both
(the cards of a seed without it do not change either): part of the activations is kept
(the expensive ops' outputs), the rest recomputed for a share of the forward's time,
the whole snapshot retained.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .profile_card import OPTIONS, OptionCost, ProfileCard, card_from_dict

__all__ = ["KINDS", "random_card"]

KINDS = ("tradeoff", "uniform", "blocks")

#: Distinct segment types in a ``"blocks"`` card.
_BLOCK_TYPES = 4

_MIB = 1 << 20

#: The options a random card has unless told otherwise: the paper's three.
DEFAULT_OPTIONS = ("eager", "whole", "region")


def _tradeoff_segment(rng: np.random.Generator, offload: bool, selective: bool = False) -> dict[str, OptionCost]:
    activations = int(rng.integers(512, 3072)) * _MIB + int(rng.integers(0, _MIB))
    workspace = int(rng.integers(64, 512)) * _MIB + int(rng.integers(0, _MIB))
    boundary = int(rng.integers(16, 128)) * _MIB + int(rng.integers(0, _MIB))
    snapshot = int(rng.integers(768, 1280)) * _MIB + int(rng.integers(0, _MIB))
    journal = int(rng.integers(1, 64)) * _MIB + int(rng.integers(0, _MIB))
    expansion = int(rng.integers(8, 96)) * _MIB + int(rng.integers(0, _MIB))
    step = float(rng.uniform(100.0, 250.0))
    forward = float(rng.uniform(40.0, 90.0))
    snapshot_ms = float(rng.uniform(4.0, 30.0))
    region_ms = float(rng.uniform(2.0, 40.0))
    out = {
        "eager": OptionCost(activations, workspace, step),
        "whole": OptionCost(
            boundary + snapshot,
            activations + workspace,
            step + forward + snapshot_ms,
            state_retained_bytes=snapshot,
            state_ms=snapshot_ms,
        ),
        "region": OptionCost(
            boundary + journal,
            activations + workspace + expansion,
            step + forward + region_ms,
            state_retained_bytes=journal,
            state_temp_bytes=expansion,
            state_ms=region_ms,
        ),
    }
    if offload:
        transfer_ms = float(rng.uniform(8.0, 80.0))
        out["offload"] = OptionCost(
            boundary,
            activations + workspace + snapshot,
            step + forward + transfer_ms,
            state_temp_bytes=snapshot,
            state_ms=transfer_ms,
        )
    if selective:  # drawn last, so a card without it draws what it always drew
        kept = int(rng.integers(0, activations))  # the expensive ops' outputs, saved
        recompute_ms = float(rng.uniform(0.1, 1.0)) * forward
        out["selective"] = OptionCost(
            boundary + kept + snapshot,
            activations - kept + workspace,
            step + recompute_ms + snapshot_ms,
            state_retained_bytes=snapshot,
            state_ms=snapshot_ms,
        )
    return out


def _uniform_segment(
    rng: np.random.Generator, max_bytes: int, offload: bool, selective: bool = False
) -> dict[str, OptionCost]:
    out = {}
    for name in DEFAULT_OPTIONS + (("offload",) if offload else ()) + (("selective",) if selective else ()):
        r, q = (int(v) for v in rng.integers(0, max_bytes, size=2))
        c = float(rng.uniform(0.0, 100.0))
        share = rng.uniform(0.0, 1.0, size=3) if name != "eager" else np.zeros(3)
        out[name] = OptionCost(
            r,
            q,
            c,
            state_retained_bytes=int(r * share[0]),
            state_temp_bytes=int(q * share[1]),
            state_ms=float(c * share[2]),
        )
    return out


def random_card(
    rng: np.random.Generator,
    n_segments: int,
    *,
    kind: str = "tradeoff",
    options: Sequence[str] = DEFAULT_OPTIONS,
    missing: float = 0.0,
    max_bytes: int = 1 << 30,
) -> ProfileCard:
    """A random, valid card with ``n_segments`` segments drawn from ``rng``.

    ``kind`` is one of ``KINDS``; ``options`` restricts which options appear; ``missing``
    is the chance each option is dropped from a segment (one is always kept);
    ``max_bytes`` bounds the ``"uniform"`` byte draws (small values force ties).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown card kind {kind!r}; valid kinds are: {', '.join(KINDS)}")
    bad = [name for name in options if name not in OPTIONS]
    if bad or not options:
        raise ValueError(f"options must be a non-empty subset of {OPTIONS}, got {tuple(options)!r}")
    segments = []
    offload, selective = "offload" in options, "selective" in options
    types = [_tradeoff_segment(rng, offload, selective) for _ in range(_BLOCK_TYPES)] if kind == "blocks" else []
    for _ in range(n_segments):
        if kind == "blocks":
            full = types[int(rng.integers(len(types)))]
        else:
            full = (
                _tradeoff_segment(rng, offload, selective)
                if kind == "tradeoff"
                else _uniform_segment(rng, max_bytes, offload, selective)
            )
        names = [name for name in OPTIONS if name in options]
        kept = [name for name in names if rng.random() >= missing] or [names[int(rng.integers(len(names)))]]
        segments.append({name: full[name] for name in kept})
    persistent = int(rng.integers(1, 8)) * (1 << 30) if kind != "uniform" else int(rng.integers(0, max_bytes))
    # Through the validator, so a synthetic card is exactly what a loaded one would be.
    return card_from_dict(
        {
            "persistent_bytes": persistent,
            "segments": [{name: cost.to_dict() for name, cost in seg.items()} for seg in segments],
            "provenance": {"workload": f"synthetic-{kind}", "segments": n_segments},
        }
    )
