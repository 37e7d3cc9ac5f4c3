"""Profile cards: per segment, what each option costs in the static model (paper eq. 3).

A card is the planner's only input besides the budget. For segment ``i`` it lists up to
five options (``OPTIONS``), each with retained bytes ``r`` (kept from forward until that segment's
backward), temporary bytes ``q`` (live only while the segment's backward runs) and time
``c`` (milliseconds per step), plus the persistent bytes ``P`` every policy pays::

    {"persistent_bytes": P,
     "segments": [{"eager":  {"retained_bytes": r, "temp_bytes": q, "ms": c},
                   "whole":  {..., "state_retained_bytes": s, "state_temp_bytes": t, "state_ms": u},
                   "region": {...},
                   "offload": {...},
                   "selective": {...}},
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

NOTE [ Card limits ]
    ``load_card`` reads a path a user names, so it refuses, in one ``CardError`` line naming
    the file and before any cost in time or memory, whatever the planner could not use:

    - anything but a regular file: a directory, FIFO, device or socket is refused from
      ``stat`` before it is opened (a FIFO would block the read forever), and again from
      ``fstat`` of a non-blocking descriptor, in case the path changed in between;
    - more than ``MAX_CARD_BYTES`` (1 MiB): a four-option card of ``MAX_SEGMENTS``
      segments as ``save_card`` writes it is ~0.22 MB, the largest shipped card (conf/cards,
      64 segments) 39 KB; at most ``MAX_CARD_BYTES + 1`` bytes are ever read;
    - nesting deeper than ``MAX_DEPTH`` (32), found by a scan of the brackets outside
      strings before ``json.loads``, whose recursion ends in ``RecursionError`` near 1,000
      levels; a card nests 4 deep, its provenance a few more;
    - an integer literal of more than ``MAX_INT_DIGITS`` (40) digits, refused before
      ``int()`` (which raises past 4,300 digits, and is quadratic below): byte counts must
      fit 64-bit sums anyway, and 40 digits leave room for a 128-bit seed in provenance;
    - NaN or Infinity (not JSON), a number beyond a 64-bit float, a key twice in one object
      (``json.loads`` would keep the last silently), an unpaired surrogate in provenance;
    - more than ``MAX_SEGMENTS`` (256) segments, counted before any segment is validated.
      The untruncated dynamic program keeps every prefix that may still be optimal, and how
      many that is depends on the card and the budget, not on its length alone. Measured on
      this project's shared 2-core machine (load ~5) on random cards (synthetic.py) at
      budgets 2-75 % of the way from the least peak to all-eager, 256 segments: at most
      4.4 s of CPU, 9 s wall (median ~2 s) with four options, 1.6 s with three, the
      shipped cards under 0.1 s; 384 segments up to 52 s wall, 512 over 150 s. The limit
      is a measured one, not a proven bound. A card of 100,000 segments cannot fit in
      ``MAX_CARD_BYTES`` (a segment takes 50 bytes at least): it is refused by size, and
      that line names both limits.

    The worst 1 MiB input (half a million tiny objects) is refused or parsed in under 0.5 s.
    ``card_from_dict`` applies none of these limits: a document already in memory (a
    synthetic card, a profiling pass) is sized by whoever built it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from types import MappingProxyType
from typing import Any

from stateaware.bounded_input import InputError, read_bounded

__all__ = [
    "MAX_CARD_BYTES",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_SEGMENTS",
    "OPTIONS",
    "PAPER_OPTIONS",
    "CardError",
    "OptionCost",
    "ProfileCard",
    "card_from_dict",
    "load_card",
    "save_card",
]

#: The options of the paper's joint planner, in the order planners report them.
#: ``offload`` (whole-state preservation with the snapshot in host memory) is its fourth.
PAPER_OPTIONS = ("eager", "whole", "region", "offload")
#: Every per-segment option a card may hold: the paper's four, then ``selective`` (a
#: replay that keeps the outputs of the expensive ops, matmul, convolution and attention,
#: and recomputes the rest; the whole state preserved), which ``stateaware.auto`` profiles.
#: Cards without an option load and digest as before, since only the options a segment
#: has are written out (NOTE [ The digest ]); indices into this tuple stay stable.
OPTIONS = (*PAPER_OPTIONS, "selective")

_REQUIRED = ("retained_bytes", "temp_bytes", "ms")
_STATE = {"state_retained_bytes": "retained_bytes", "state_temp_bytes": "temp_bytes", "state_ms": "ms"}
_ALLOWED_FIELDS = _REQUIRED + tuple(_STATE)

#: The most segments ``load_card`` accepts; see NOTE [ Card limits ] for the planning
#: time measured at it (re-measure before raising it: the time grows far faster than n).
MAX_SEGMENTS = 256
#: The largest card file ``load_card`` reads, in bytes.
MAX_CARD_BYTES = 1 << 20
#: The deepest bracket nesting a card may have (a card itself nests 4 deep).
MAX_DEPTH = 32
#: The most digits an integer literal in a card may have.
MAX_INT_DIGITS = 40

#: A JSON string (escapes included), for the nesting pre-scan to skip.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}

#: Non-regular file kinds ``load_card`` refuses, by ``stat`` mode test.
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


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


def _shown(value: Any, width: int = 80) -> str:
    """``repr(value)``, cut to ``width`` characters: a card's value may be a megabyte long."""
    text = repr(value)
    return text if len(text) <= width else f"{text[: width - 3]}..."


def _some(names: list[str], shown: int = 5) -> str:
    """The first ``shown`` names, quoted, and how many more: an error stays one short line."""
    listed = ", ".join(map(_shown, names[:shown]))
    return listed if len(names) <= shown else f"{listed} and {len(names) - shown:,} more"


def _int_field(value: Any, where: str) -> int:
    # bool is an int subclass; a card saying "retained_bytes": true is a bug, not 1 byte.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CardError(f"{where} must be a non-negative integer number of bytes, got {_shown(value)}")
    if isinstance(value, float):
        if not value.is_integer():
            raise CardError(f"{where} must be a whole number of bytes, got {value!r}")
        value = int(value)
    if value < 0:
        raise CardError(f"{where} must be non-negative, got {value!r}")
    return int(value)


def _ms_field(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CardError(f"{where} must be a non-negative number of milliseconds, got {_shown(value)}")
    ms = float(value)
    if not math.isfinite(ms) or ms < 0:
        raise CardError(f"{where} must be finite and non-negative, got {ms!r}")
    return ms


def _option_from_dict(raw: Any, where: str) -> OptionCost:
    if not isinstance(raw, Mapping):
        raise CardError(f"{where} must be an object with fields {', '.join(_REQUIRED)}, got {_shown(raw)}")
    unknown = sorted(set(raw) - set(_ALLOWED_FIELDS))
    if unknown:
        raise CardError(f"{where}: unknown field(s) {_some(unknown)}; valid fields are: {', '.join(_ALLOWED_FIELDS)}")
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
            f"card: unknown key(s) {_some(unknown)}; valid keys are: persistent_bytes, segments, provenance"
        )
    if "persistent_bytes" not in doc:
        raise CardError("card: missing field persistent_bytes")
    persistent = _int_field(doc["persistent_bytes"], "persistent_bytes")
    raw_segments = doc.get("segments")
    if not isinstance(raw_segments, list) or not raw_segments:
        raise CardError(f"card: segments must be a non-empty list, got {_shown(raw_segments)}")
    segments = []
    for index, raw in enumerate(raw_segments):
        where = f"segments[{index}]"
        if not isinstance(raw, Mapping):
            raise CardError(f"{where} must be an object keyed by option, got {_shown(raw)}")
        unknown = sorted(set(raw) - set(OPTIONS))
        if unknown:
            raise CardError(f"{where}: unknown option(s) {_some(unknown)}; valid options are: {', '.join(OPTIONS)}")
        if not raw:
            raise CardError(f"{where} has no option; give at least one of {', '.join(OPTIONS)}")
        options = {name: _option_from_dict(raw[name], f"{where}.{name}") for name in OPTIONS if name in raw}
        # Read-only views: a frozen card must not change under a planner that holds it.
        segments.append(MappingProxyType(options))
    provenance = doc.get("provenance", {})
    if not isinstance(provenance, Mapping):
        raise CardError(f"card: provenance must be an object, got {_shown(provenance)}")
    return ProfileCard(
        persistent_bytes=persistent,
        segments=tuple(segments),
        provenance=MappingProxyType(dict(provenance)),
    )


def _file_kind(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) else "an unknown kind of file"


def _refuse_kind(mode: int, name: str) -> None:
    kind = _file_kind(mode)
    if kind is not None:
        raise CardError(f"{name}: is {kind}, not a regular file; a card is a JSON file")


def _too_big(name: str, size: str) -> CardError:
    return CardError(
        f"{name}: is {size} bytes; a card is at most {MAX_CARD_BYTES:,} bytes (MAX_CARD_BYTES) "
        f"and {MAX_SEGMENTS} segments (MAX_SEGMENTS)"
    )


def _read_card_bytes(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the card file at ``path``, refusing anything but a bounded regular file.

    Never blocks and never reads more than ``MAX_CARD_BYTES + 1`` bytes: a FIFO, device,
    socket or directory is refused from ``stat`` before it is opened, and again from
    ``fstat`` of a non-blocking descriptor (the path may be swapped between the two).
    """
    name = os.fspath(path)
    try:
        info = os.stat(path)
    except OSError as error:
        raise CardError(f"{name}: cannot read the card ({error.strerror or error})") from None
    _refuse_kind(info.st_mode, name)
    if info.st_size > MAX_CARD_BYTES:
        raise _too_big(name, f"{info.st_size:,}")
    try:  # the one bounded reader; regular_only: the path may have been swapped since stat
        return read_bounded(path, what=name, bound=MAX_CARD_BYTES, regular_only=True)
    except InputError as error:  # st_size was 0 or stale: a /proc file, or one still growing
        if error.too_big:
            raise _too_big(name, f"more than {MAX_CARD_BYTES:,}") from None
        raise CardError(f"{error}; a card is a JSON file").with_traceback(None) from None


def _nesting_depth(text: str) -> int:
    """The deepest bracket nesting of ``text`` outside JSON strings (exact for valid JSON).

    For invalid JSON it may over-count (an unterminated string's brackets count), never
    under-count the prefix a parser would read before failing: a safe pre-check for
    ``json.loads``, whose recursion ends in ``RecursionError`` near 1,000 levels.
    """
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0)


def _bounded_int(literal: str) -> int:
    # Called by json.loads before int(): a huge literal is refused before Python's own
    # int_max_str_digits (4,300) raises, and before a quadratic conversion is paid.
    digits = len(literal.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise CardError(
            f"an integer of {digits:,} digits ({literal[:16]}...); a card's integers have at most "
            f"{MAX_INT_DIGITS} digits (MAX_INT_DIGITS)"
        )
    return int(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise CardError(f"the number {literal[:24]} is beyond the range of a 64-bit float")
    return value


def _no_constant(name: str) -> float:
    raise CardError(f"{name} is not a JSON number; a card's numbers are finite")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys silently; a card with two "segments" (or
    # two "ms" in one option) is ambiguous, and other JSON readers may keep the first.
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise CardError(f"duplicate key {_shown(key)} in one JSON object")
            seen.add(key)
    return doc


def _parse_card_text(text: str) -> Any:
    """``json.loads`` of a card's text within the card limits; ``CardError`` names the problem."""
    depth = _nesting_depth(text)
    if depth > MAX_DEPTH:
        raise CardError(f"brackets nested {depth:,} deep; a card nests at most {MAX_DEPTH} (MAX_DEPTH)")
    if not text.strip():
        raise CardError("not valid JSON (the file is empty or blank)")
    try:
        return json.loads(
            text,
            parse_int=_bounded_int,
            parse_float=_finite_float,
            parse_constant=_no_constant,
            object_pairs_hook=_unique_keys,
        )
    except json.JSONDecodeError as error:
        raise CardError(f"not valid JSON ({error})") from None


def _refuse_segment_count(doc: Any) -> None:
    # Before card_from_dict validates every segment: an oversized card costs no more.
    segments = doc.get("segments") if isinstance(doc, Mapping) else None
    if isinstance(segments, list) and len(segments) > MAX_SEGMENTS:
        raise CardError(
            f"{len(segments):,} segments; a card has at most {MAX_SEGMENTS:,} (MAX_SEGMENTS: beyond it the "
            "planner's time grows far faster than the segment count)"
        )


def _refuse_lone_surrogates(provenance: Mapping[str, Any]) -> None:
    # A JSON escape such as "\\ud800" decodes to a lone surrogate: not Unicode, and any
    # UTF-8 writer (printing the card's hardware name) would raise. Provenance is the only
    # free text a card holds; every other string must be a known key.
    try:
        json.dumps(dict(provenance), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        raise CardError(
            f"provenance holds an unpaired UTF-16 surrogate ({error.object[error.start]!r}); a card is Unicode text"
        ) from None


def load_card(path: str | os.PathLike[str]) -> ProfileCard:
    """Read and validate a card from a JSON file within the card limits (NOTE [ Card limits ]).

    Every problem is a ``CardError`` of one line naming the file: a path that is missing
    or not a regular file (a directory, FIFO, device or socket: refused without blocking),
    a file over ``MAX_CARD_BYTES``, text that is not UTF-8 or not JSON, nesting deeper than
    ``MAX_DEPTH``, an integer longer than ``MAX_INT_DIGITS`` digits, NaN or Infinity, a
    number beyond a 64-bit float, a duplicate key, more than ``MAX_SEGMENTS`` segments, or
    any problem ``card_from_dict`` names. Reads the module's limits at call time.
    """
    name = os.fspath(path)
    raw = _read_card_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CardError(f"{name}: not UTF-8 text (byte {error.start}); a card is UTF-8 JSON") from None
    try:
        doc = _parse_card_text(text)
        _refuse_segment_count(doc)
        card = card_from_dict(doc)
        _refuse_lone_surrogates(card.provenance)
        return card
    except CardError as error:
        raise CardError(f"{name}: {error}") from None


def save_card(card: ProfileCard, path: str | os.PathLike[str]) -> str:
    """Write ``card`` as indented JSON (temporary file, then rename); returns its digest."""
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(card.to_dict(), handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)
    return card.digest
