"""Python's and NumPy's global random generators: the replay draws what the forward drew.

``random.random()`` or ``np.random.rand()`` inside a segment advances a process-global
generator that torch's RNG stash does not cover; a replay that drew again would compute
different numbers (gradients off) and leave the stream advanced twice. Like torch's RNG
(NOTE [ Replay transaction ], Rule 8), a generator the segment drew from is preserved:
its state before the forward is kept; a replay runs with it set and the state the
generator had just before the replay is put back afterwards, so it ends where eager
leaves it (advanced once, by the forward).

Cost: ``random.getstate()`` is ~10-25 µs and ``np.random.get_state()`` ~50-100 µs (a copy
of the 624-word Mersenne state each), too much for every call. So the states are read
only around a *recorded* forward (``_learned_reads``: the first call of a call shape, or
every call under ``"every_call"``), which learns whether the segment drew; the learned
calls after it capture only the generators it drew from (none: no cost). NumPy is looked
at only when it is already imported. Limit: a segment that draws only on some calls of
one call shape (data-dependent control flow) is preserved only as far as its first call
drew, as Rule 6's reads are.
"""

from __future__ import annotations

import random
import sys
from typing import Any

__all__ = ["HOST_GENERATORS", "capture", "moved", "HostRngState"]

#: The host generators handled, by the name used in profiles.
HOST_GENERATORS = ("random", "numpy")


def _get(name: str) -> Any:
    if name == "random":
        return random.getstate()
    return sys.modules["numpy"].random.get_state()


def _set(name: str, state: Any) -> None:
    if name == "random":
        random.setstate(state)
    else:
        sys.modules["numpy"].random.set_state(state)


def _available() -> tuple[str, ...]:
    return HOST_GENERATORS if "numpy" in sys.modules else HOST_GENERATORS[:1]


def capture(which: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The states of ``which`` generators (default: every available one), before a forward."""
    return {name: _get(name) for name in (which if which is not None else _available())}


def _same(name: str, a: Any, b: Any) -> bool:
    if name == "random":
        return bool(a == b)
    # ('MT19937', key array, pos, has_gauss, cached_gaussian): the array needs an explicit compare
    return bool(a[0] == b[0] and a[2:] == b[2:] and (a[1] == b[1]).all())


def moved(before: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``before`` whose generator was drawn from since (compared after a forward)."""
    return {name: state for name, state in before.items() if not _same(name, state, _get(name))}


class HostRngState:
    """Preserves the host generators a segment drew from across its replays (``enter``/``exit``)."""

    __slots__ = ("states", "outside")

    def __init__(self, states: dict[str, Any]):
        self.states = states
        self.outside: dict[str, Any] | None = None

    def enter(self) -> None:
        self.outside = {name: _get(name) for name in self.states}
        for name, state in self.states.items():
            _set(name, state)

    def exit(self) -> None:
        if self.outside is not None:
            for name, state in self.outside.items():
                _set(name, state)
            self.outside = None
