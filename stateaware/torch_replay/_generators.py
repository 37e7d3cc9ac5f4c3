"""Declared ``torch.Generator`` objects: the replay draws what the forward drew.

``torch.rand(..., generator=g)`` inside a segment advances ``g``; a replay that drew
again would see different numbers and leave ``g`` advanced twice. A generator declared
in ``state=[g]`` is preserved like a tensor (NOTE [ Replay transaction ], Rules 1 and 5):
its state is read before the forward; a replay runs with that state set and the state
``g`` had just before the replay put back afterwards, so ``g`` ends where eager leaves
it (advanced once, by the forward). ``get_state``/``set_state`` exist for CPU and CUDA
generators alike and return a CPU byte tensor (a CUDA generator's is its seed and
Philox offset), so neither direction synchronises the device.
"""

from __future__ import annotations

import torch

__all__ = ["GeneratorState"]


class GeneratorState:
    """Preserves one declared generator across a segment's replays."""

    __slots__ = ("generator", "name", "state", "outside")

    def __init__(self, generator: torch.Generator, name: str):
        self.generator, self.name = generator, name
        self.state = generator.get_state()
        self.outside: torch.Tensor | None = None

    def enter(self) -> None:
        self.outside = self.generator.get_state()
        self.generator.set_state(self.state)

    def exit(self) -> None:
        if self.outside is not None:
            self.generator.set_state(self.outside)
            self.outside = None
