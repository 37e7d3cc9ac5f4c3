"""Profile cards: per segment, what each option costs in the static model (paper eq. 3).

A card is the planner's only input besides the budget. For segment ``i`` it lists up to
four options (``OPTIONS``), each with retained bytes ``r`` (kept from forward until that segment's
backward), temporary bytes ``q`` (live only while the segment's backward runs) and time
``c`` (milliseconds per step), plus the persistent bytes ``P`` every policy pays::

    {"persistent_bytes": P,
     "segments": [{"eager":  {"retained_bytes": r, "temp_bytes": q, "ms": c},
                   "whole":  {..., "state_retained_bytes": s, "state_temp_bytes": t, "state_ms": u},
                   "region": {...},
                   "offload": {...}},
                  ...],
     "provenance": {"workload": ..., "shape": ..., "hardware": ..., "measured_at": ...}}

An option is absent where a segment lacks it (dense writes remove the cheap region option).

NOTE [ The state_* fields ]
    ``state_retained_bytes``, ``state_temp_bytes`` and ``state_ms`` (optional, default 0)
    say how much of an option's ``retained_bytes``, ``temp_bytes`` and ``ms`` is state
    preservation and recovery: the whole snapshot or region journal kept until backward,
    the restore/expansion workspace, and the copy/gather/scatter time. They never add to
    the totals — each must lie in ``[0, total]`` — and only the state-agnostic control
    planner reads them (it plans as though that part cost nothing). Eager retention
    normally has none; the fields are allowed on every option so one rule covers all.

NOTE [ The digest ]
    ``ProfileCard.digest`` is the SHA-256 of the canonical JSON of the *normalised* costs:
    ``persistent_bytes`` and ``segments`` with every field of every present option written
    out (bytes as integers, ms as floats, zero defaults included), keys sorted, no spaces.
    Provenance is deliberately excluded: the digest names the planning input, so two cards
    with equal costs plan identically and share a digest however they were measured, and
    correcting a provenance typo does not turn a frozen card into a different one. Spelling
    differences (``3`` vs ``3.0`` ms, key order, an omitted zero ``state_ms``) do not change
    the digest either.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = [
    "OPTIONS",
    "CardError",
    "OptionCost",
    "ProfileCard",
    "card_from_dict",
    "load_card",
    "save_card",
]

#: The per-segment options of the static model, in the order planners report them.
#: ``offload`` (whole-state preservation with the snapshot in host memory) is the
#: ``joint`` planner's fourth option; cards without it load and digest as before, since
#: only the options a segment has are written out (NOTE [ The digest ]).
OPTIONS = ("eager", "whole", "region", "offload")

_REQUIRED = ("retained_bytes", "temp_bytes", "ms")
_STATE = {"state_retained_bytes": "retained_bytes", "state_temp_bytes": "temp_bytes", "state_ms": "ms"}
_ALLOWED_FIELDS = _REQUIRED + tuple(_STATE)


class CardError(ValueError):
    """A malformed profile card; the message names the segment index and the field."""


@dataclass(frozen=True)
class OptionCost:
    """One option's costs for one segment: ``r``, ``q``, ``c`` of eq. 3 and their state parts.

    Bytes are exact integers; ``ms`` is a finite float. The ``state_*`` parts are the share
    of each total that is preservation/recovery (see NOTE [ The state_* fields ]).
    """

    retained_bytes: int
    temp_bytes: int
    ms: float
    state_retained_bytes: int = 0
    state_temp_bytes: int = 0
    state_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Every field, normalised (ints for bytes, floats for ms): the canonical form."""
        return {
            "retained_bytes": int(self.retained_bytes),
            "temp_bytes": int(self.temp_bytes),
            "ms": float(self.ms),
            "state_retained_bytes": int(self.state_retained_bytes),
            "state_temp_bytes": int(self.state_temp_bytes),
            "state_ms": float(self.state_ms),
        }

    def without_state(self) -> OptionCost:
        """The option as the state-agnostic control sees it: the state parts removed."""
        return OptionCost(
            retained_bytes=self.retained_bytes - self.state_retained_bytes,
            temp_bytes=self.temp_bytes - self.state_temp_bytes,
            ms=self.ms - self.state_ms,
        )


@dataclass(frozen=True)
class ProfileCard:
    """Persistent bytes, per-segment option costs and provenance; named by ``digest``.

    ``segments[i]`` maps an option name (one of ``OPTIONS``) to its ``OptionCost``; every
    segment has at least one option. Build one with ``card_from_dict`` or ``load_card`` so
    it is validated.
    """

    persistent_bytes: int
    segments: tuple[Mapping[str, OptionCost], ...]
    provenance: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def n_segments(self) -> int:
        return len(self.segments)

    def canonical_costs(self) -> dict[str, Any]:
        """The normalised costs the digest covers (no provenance)."""
        return {
            "persistent_bytes": int(self.persistent_bytes),
            "segments": [{name: seg[name].to_dict() for name in OPTIONS if name in seg} for seg in self.segments],
        }

    @property
    def digest(self) -> str:
        """SHA-256 (hex) of the canonical cost JSON; see NOTE [ The digest ]."""
        text = json.dumps(self.canonical_costs(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        """The card as its JSON document: costs in canonical form plus provenance."""
        return {**self.canonical_costs(), "provenance": dict(self.provenance)}


def _int_field(value: Any, where: str) -> int:
    # bool is an int subclass; a card saying "retained_bytes": true is a bug, not 1 byte.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CardError(f"{where} must be a non-negative integer number of bytes, got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise CardError(f"{where} must be a whole number of bytes, got {value!r}")
        value = int(value)
    if value < 0:
        raise CardError(f"{where} must be non-negative, got {value!r}")
    return int(value)


def _ms_field(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CardError(f"{where} must be a non-negative number of milliseconds, got {value!r}")
    ms = float(value)
    if not math.isfinite(ms) or ms < 0:
        raise CardError(f"{where} must be finite and non-negative, got {ms!r}")
    return ms


def _option_from_dict(raw: Any, where: str) -> OptionCost:
    if not isinstance(raw, Mapping):
        raise CardError(f"{where} must be an object with fields {', '.join(_REQUIRED)}, got {raw!r}")
    unknown = sorted(set(raw) - set(_ALLOWED_FIELDS))
    if unknown:
        raise CardError(
            f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; valid fields are: {', '.join(_ALLOWED_FIELDS)}"
        )
    missing = [name for name in _REQUIRED if name not in raw]
    if missing:
        raise CardError(f"{where}: missing field(s) {', '.join(missing)}")
    values: dict[str, Any] = {}
    for name in _ALLOWED_FIELDS:
        parse = _ms_field if name.endswith("ms") else _int_field
        values[name] = parse(raw.get(name, 0), f"{where}.{name}")
    for part, total in _STATE.items():
        if values[part] > values[total]:
            raise CardError(
                f"{where}.{part} = {values[part]!r} exceeds {total} = {values[total]!r}; "
                "the state part is a share of the total, not an addition to it"
            )
    return OptionCost(**values)


def card_from_dict(doc: Any) -> ProfileCard:
    """Validate a card document and build the ``ProfileCard``.

    Raises ``CardError`` naming the segment index and field of the first problem found:
    a missing or unknown field, a negative, fractional or non-numeric byte count, a
    non-finite or negative time, a state part larger than its total, or a segment with no
    option at all.
    """
    if not isinstance(doc, Mapping):
        raise CardError(f"a profile card must be a JSON object, got {type(doc).__name__}")
    unknown = sorted(set(doc) - {"persistent_bytes", "segments", "provenance"})
    if unknown:
        raise CardError(
            f"card: unknown key(s) {', '.join(map(repr, unknown))}; "
            "valid keys are: persistent_bytes, segments, provenance"
        )
    if "persistent_bytes" not in doc:
        raise CardError("card: missing field persistent_bytes")
    persistent = _int_field(doc["persistent_bytes"], "persistent_bytes")
    raw_segments = doc.get("segments")
    if not isinstance(raw_segments, list) or not raw_segments:
        raise CardError(f"card: segments must be a non-empty list, got {raw_segments!r}")
    segments = []
    for index, raw in enumerate(raw_segments):
        where = f"segments[{index}]"
        if not isinstance(raw, Mapping):
            raise CardError(f"{where} must be an object keyed by option, got {raw!r}")
        unknown = sorted(set(raw) - set(OPTIONS))
        if unknown:
            raise CardError(
                f"{where}: unknown option(s) {', '.join(map(repr, unknown))}; valid options are: {', '.join(OPTIONS)}"
            )
        if not raw:
            raise CardError(f"{where} has no option; give at least one of {', '.join(OPTIONS)}")
        options = {name: _option_from_dict(raw[name], f"{where}.{name}") for name in OPTIONS if name in raw}
        # Read-only views: a frozen card must not change under a planner that holds it.
        segments.append(MappingProxyType(options))
    provenance = doc.get("provenance", {})
    if not isinstance(provenance, Mapping):
        raise CardError(f"card: provenance must be an object, got {provenance!r}")
    return ProfileCard(
        persistent_bytes=persistent,
        segments=tuple(segments),
        provenance=MappingProxyType(dict(provenance)),
    )


def load_card(path: str | os.PathLike[str]) -> ProfileCard:
    """Read and validate a card from a JSON file; ``CardError`` names the file on bad JSON.

    Bad JSON, text that is not UTF-8, or a file that cannot be read (missing, a directory)
    is a ``CardError`` too, so every reader of cards says what is wrong in one line.
    """
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as error:
        raise CardError(f"{os.fspath(path)}: cannot read the card ({error.strerror or error})") from None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise CardError(f"{os.fspath(path)}: not UTF-8 text (byte {error.start}); a card is UTF-8 JSON") from None
    except json.JSONDecodeError as error:
        raise CardError(f"{os.fspath(path)}: not valid JSON ({error})") from None
    try:
        return card_from_dict(doc)
    except CardError as error:
        raise CardError(f"{os.fspath(path)}: {error}") from None


def save_card(card: ProfileCard, path: str | os.PathLike[str]) -> str:
    """Write ``card`` as indented JSON (temporary file, then rename); returns its digest."""
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(card.to_dict(), handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)
    return card.digest
