"""Frozen profile cards: stored under ``conf/cards/<name>-<digest12>.json``, named by digest.

A confirmation cohort names its card by digest; ``load_frozen`` refuses to return a
card whose file is missing, ambiguous, or whose contents no longer hash to that digest, so
an edited card can never silently change a confirmation's policies.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import stateaware.conf as packaged_conf
from stateaware.planner.profile_card import card_from_dict, load_card, save_card

__all__ = ["CARDS_DIR", "FrozenCardError", "freeze", "load_frozen", "card_path"]


def _default_dir() -> Path:
    return Path(packaged_conf.__file__).parent / "cards"


#: Where frozen cards live (version-controlled, shipped with the configs).
CARDS_DIR = _default_dir()


class FrozenCardError(RuntimeError):
    """The named frozen card is missing, ambiguous or no longer matches its digest."""


def card_path(name: str, digest: str, directory: str | os.PathLike[str] | None = None) -> Path:
    """Where the card ``name`` with ``digest`` is frozen."""
    return Path(directory or CARDS_DIR) / f"{name}-{digest[:12]}.json"


def freeze(doc: dict[str, Any], name: str, directory: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """Validate the card document, write it as ``<name>-<digest12>.json``; ``(path, digest)``."""
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"card name {name!r} must be a plain file-name stem")
    card = card_from_dict(doc)
    path = card_path(name, card.digest, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_card(card, path)
    return path, card.digest


def load_frozen(digest: str, directory: str | os.PathLike[str] | None = None) -> Any:
    """The frozen ``ProfileCard`` whose digest is ``digest`` (full hex, or at least 12 digits).

    Raises ``FrozenCardError`` when no file ``*-<digest12>.json`` exists, when several
    do, or when the file's costs hash to a different digest (it was edited after freezing).
    """
    if not isinstance(digest, str) or len(digest) < 12:
        raise FrozenCardError(
            f"card digest {digest!r}: give at least the first 12 hex digits of a frozen card's digest"
        )
    folder = Path(directory or CARDS_DIR)
    matches = sorted(folder.glob(f"*-{digest[:12]}.json"))
    if not matches:
        raise FrozenCardError(
            f"no frozen card with digest {digest[:12]} under {folder}; freeze one with "
            "`python -m stateaware.cost_runtime.freeze --help`"
        )
    if len(matches) > 1:
        raise FrozenCardError(f"digest {digest[:12]} names several cards: {', '.join(p.name for p in matches)}")
    card = load_card(matches[0])
    if not card.digest.startswith(digest):
        raise FrozenCardError(
            f"{matches[0]}: its costs hash to {card.digest[:12]}, not {digest[:12]}; the frozen card "
            "was edited after freezing — restore it or freeze a new card and name the new digest"
        )
    return card
