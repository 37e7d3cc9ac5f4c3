"""A cohort kind's declared parameters, checked once when a run is planned.

A kind module may declare ``PARAMS: dict[str, Param]``; ``check_params`` then checks
the cohort's ``params`` against it in the submitting process, before anything launches,
so a negative size or an unknown method fails once with one line naming the field and
the allowed values — not in every one of a hundred processes. A kind without ``PARAMS``
is not checked (a user's kind may leave it out; its ``expand``/``run`` check then).

Only the kind's user-facing keys are declared; keys ``expand`` adds per process
(``cell``, ``start``, ...) never pass through here.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Param", "check_params"]

_TYPE_WORDS: dict[type | None, str] = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "true or false",
    list: "a list",
    dict: "a mapping",
}


@dataclass(frozen=True)
class Param:
    """One declared parameter: its type and, where they apply, range and allowed values.

    ``type`` is ``int``, ``float``, ``str``, ``bool``, ``list`` or ``dict``. For a list,
    ``item`` is its elements' type and ``minimum``/``maximum``/``choices`` apply to each
    element; a list must not be empty. ``minimum``/``maximum`` are inclusive; ``above`` is an
    exclusive lower bound (a time or a ratio that must be positive). A ``float`` is finite.
    ``required``: the key must be present (the kind has no default for it). ``unique``: a
    list may not name one value twice (a method run twice would be measured twice under
    one part name).

    An ``int`` that counts something a run expands (programs, seed keys, steps) should
    declare its ``maximum``: the expansion is built before launch, so an unbounded count
    (``seed_keys=10**12``) would exhaust memory instead of being refused.
    """

    type: type
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None
    choices: tuple[Any, ...] | None = None
    item: builtins.type | None = None  # `type` alone would name the field above
    required: bool = False
    nullable: bool = False
    unique: bool = False

    def allowed(self) -> str:
        """The allowed values in words, for an error message."""
        scalar = self.item if self.type is list else self.type
        words = f"one of {', '.join(map(str, self.choices))}" if self.choices else _TYPE_WORDS.get(scalar, str(scalar))
        low, above, high = (_bound(b) for b in (self.minimum, self.above, self.maximum))
        if low and high:
            words += f" in [{low}, {high}]"
        elif above and high:
            words += f" in ({above}, {high}]"
        elif low:
            words += f" >= {low}"
        elif above:
            words += f" > {above}"
        elif high:
            words += f" <= {high}"
        if self.type is list:
            words = f"a non-empty list{' without repeats' if self.unique else ''}, each {words}"
        return words + (" (or null)" if self.nullable else "")

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if self.type is list:
            return (
                isinstance(value, Sequence)
                and not isinstance(value, (str, bytes))
                and len(value) > 0
                and all(self._scalar_ok(self.item, v) for v in value)
                and (not self.unique or len(set(map(repr, value))) == len(value))
            )
        if self.type is dict:
            return isinstance(value, Mapping)
        return self._scalar_ok(self.type, value)

    def _scalar_ok(self, kind: builtins.type | None, value: Any) -> bool:
        if kind is None:
            ok = True
        elif kind is bool:
            ok = isinstance(value, bool)
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else:
            ok = isinstance(value, kind)
        if not ok:
            return False
        if self.choices is not None and value not in self.choices:
            return False
        if self.minimum is not None and value < self.minimum:
            return False
        if self.above is not None and value <= self.above:
            return False
        return self.maximum is None or value <= self.maximum


def _bound(value: float | None) -> str:
    """A bound as a message shows it: an integer exactly (``4096``, ``100,000``), a float shortest
    (``1e+07``); "" for none."""
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    return f"{value:g}"


def check_params(params: Mapping[str, Any], declared: Mapping[str, Param], cohort: str) -> None:
    """Raise ``ValueError`` naming the first bad, unknown or missing key of ``params``.

    The message names the cohort and ``params.<key>=<value>`` and lists what is allowed.
    """
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise ValueError(
            f"cohort {cohort!r}: unknown parameter(s) {', '.join(f'params.{k}' for k in unknown)}; "
            f"valid parameters are: {', '.join(declared) or '(none)'}"
        )
    for key, param in declared.items():
        if key not in params:
            if param.required:
                raise ValueError(f"cohort {cohort!r}: params.{key} is missing; allowed values are {param.allowed()}")
            continue
        if not param.accepts(params[key]):
            raise ValueError(
                f"cohort {cohort!r}: invalid params.{key}={params[key]!r}; allowed values are {param.allowed()}"
            )
