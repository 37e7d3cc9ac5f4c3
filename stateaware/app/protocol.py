"""The CIFAR application's protocol: methods, processes, per-profile knobs, card and budget.

Everything here takes the cohort's ``params`` and the hardware profile as plain dicts (as
``conf/cohort/cifar.yaml`` and ``conf/hardware/*.yaml`` hold them) and never reads
``conf/`` itself, so the cohort kind, ``python -m stateaware.app.encoder_card`` and a
notebook share one definition. This module imports nothing heavy (no torch): planning a
run expands processes without it.

``params.protocols.<hardware name>`` holds the profile's knobs: the ``Protocol``
fields, ``processes``, ``fit``/``validation``/``test`` image counts, ``split_seed``,
``threads``, ``verify_checksum``, ``quality_only_seeds``, and the selection budget as
``budget_mib`` (absolute) or ``budget_position`` (relative between the card's anchors),
and optionally ``card``: the digest of a frozen card.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

from stateaware.cost_runtime.plans import budget_at

__all__ = [
    "METHODS",
    "CARD_SHAPE",
    "Protocol",
    "protocol_of",
    "protocol_from",
    "process_pairs",
    "split_sizes",
    "check_card_shape",
    "budget_bytes",
    "workload_columns",
]

#: The seven methods, in the order records and Table 9 list them (``stateaware.app.moco``
#: runs them). Defined here, where nothing heavy is imported, so planning and the
#: analysis name them without torch.
METHODS = ("eager", "whole", "regions", "functional", "deferred", "agnostic", "joint")

#: Protocol fields that fix a card's costs: a frozen card must have been profiled at these.
CARD_SHAPE = ("image", "width", "dim", "queue_size", "batch")

_MIB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Protocol:
    """The knobs of one run (the paper's at ``hardware=h100``; reduced on CPU)."""

    image: int = 32  # crop size (32: the full image)
    width: int = 64
    dim: int = 128
    queue_size: int = 131072  # x dim x 4 bytes: 64 MiB at dim 128
    batch: int = 128
    peaks: str = "step"  # reset the allocator peak after every "step" or every "epoch"
    encoder_epochs: int = 100
    probe_epochs: int = 25
    lr: float = 0.06
    probe_lr: float = 0.01  # on standardised features (see stateaware.app.train.probe)
    probe_batch: int = 256
    temperature: float = 0.2
    momentum: float = 0.99
    weight_decay: float = 5e-4


def protocol_of(params: dict[str, Any], hardware: dict[str, Any]) -> dict[str, Any]:
    """The protocol block for ``hardware``'s profile name; ``ValueError`` listing the valid ones."""
    protocols = params.get("protocols") or {}
    name = str(hardware.get("name", "cpu"))
    if name not in protocols:
        raise ValueError(
            f"cohort params.protocols has no entry for hardware {name!r}; valid entries are: "
            f"{', '.join(protocols) or '(none)'}"
        )
    return dict(protocols[name])


def protocol_from(block: dict[str, Any]) -> Protocol:
    """The ``Protocol`` of a protocol block (its other keys are the cohort's, not training's)."""
    fields = {f.name for f in dataclasses.fields(Protocol)}
    return Protocol(**{k: v for k, v in block.items() if k in fields})


def process_pairs(
    params: dict[str, Any], hardware: dict[str, Any], processes: int, cohort: str | None = None
) -> list[dict[str, Any]]:
    """One (seed, method) per process, seed-major: ``processes`` must be ``7 * k`` with
    ``k <= len(params.seeds)``; the first ``k`` seeds run. ``params.archive`` must name a
    file (checked here, so a missing archive fails before any process starts; a relative
    path is the working directory's); each process gets its absolute path."""
    seeds = [int(s) for s in params.get("seeds") or []]
    protocol_of(params, hardware)  # fail here, before any process starts, on an unknown profile
    if processes % len(METHODS) or processes // len(METHODS) > len(seeds) or processes < 1:
        raise ValueError(
            f"cohort {cohort!r}: processes={processes} must be 7 x the number of seeds "
            f"run (at most {len(seeds)} seeds: {seeds})"
        )
    archive = Path(str(params.get("archive"))).expanduser().resolve()
    if not archive.is_file():
        raise ValueError(
            f"cohort.params.archive={params.get('archive')}: no file at {archive}; put the official "
            "cifar-100-python.tar.gz there (runs never download it) or, for a CPU run, write a "
            f"generated one: python -m stateaware.app.data {archive}"
        )
    # Every process reads the same file, whatever directory it starts in.
    return [
        {"train_seed": seeds[i // len(METHODS)], "method": METHODS[i % len(METHODS)], "archive": str(archive)}
        for i in range(processes)
    ]


def split_sizes(fit: int | None, validation: int | None, n_train: int) -> tuple[int, int]:
    """The fitting and validation counts for an archive of ``n_train`` training images.

    ``None`` means all the remaining images. When the archive holds fewer images than the
    protocol asks for (a small generated archive), both shrink in the protocol's ratio —
    say so on stderr — rather than one of them silently vanishing.
    """
    fit_n = n_train if fit is None else int(fit)
    val_n = n_train - min(fit_n, n_train) if validation is None else int(validation)
    if fit_n + val_n <= n_train:
        return fit_n, val_n
    scaled = max(1, fit_n * n_train // (fit_n + val_n))
    print(
        f"cifar: the archive has {n_train} training images, fewer than fit={fit_n} + validation={val_n}: "
        f"using {scaled} + {n_train - scaled} in the same ratio",
        file=sys.stderr,
    )
    return scaled, n_train - scaled


def check_card_shape(card: Any, proto: Protocol, hardware: str) -> Any:
    """``card``, refused (``ValueError``) when it was profiled at other ``CARD_SHAPE``
    values than ``proto``'s: its costs would describe another program."""
    profiled = dict(card.provenance).get("protocol") or {}
    wrong = {k: (profiled.get(k), getattr(proto, k)) for k in CARD_SHAPE if profiled.get(k) != getattr(proto, k)}
    if wrong:
        raise ValueError(
            f"frozen card {card.digest[:12]} (params.protocols.{hardware}.card) was profiled at "
            + ", ".join(f"{k}={a}" for k, (a, _) in wrong.items())
            + "; the protocol has "
            + ", ".join(f"{k}={b}" for k, (_, b) in wrong.items())
            + f": freeze a card for it with `python -m stateaware.app.encoder_card --hardware {hardware}`"
        )
    return card


def budget_bytes(block: dict[str, Any], card: Any) -> int:
    """The selection budget: ``budget_mib`` MiB, else ``budget_position`` between ``card``'s
    anchors (``stateaware.cost_runtime.plans.budget_at``)."""
    if "budget_mib" in block:
        return int(float(block["budget_mib"]) * _MIB)
    return budget_at(card, float(block["budget_position"]))


def workload_columns(proto: Protocol, budget: int, hardware: str, segments: int) -> dict[str, Any]:
    """The record store's workload columns of the application (``segments``: the encoder's
    planned segments, ``stateaware.app.moco.n_segments()``); ``cell`` is the profile name."""
    return {
        "workload": "cifar",
        "cell": hardware,
        "buffer_bytes": proto.queue_size * proto.dim * 4,
        "write_fraction": proto.batch / proto.queue_size,
        "live_segments": segments,
        "granularity_bytes": proto.dim * 4,
        "width": proto.width,
        "batch": proto.batch,
        "budget_bytes": int(budget),
    }
