"""One colour per method, the same in every figure of the report.

Figures 1, 3 and 3C (:mod:`stateaware.analysis.figures`, :mod:`stateaware.analysis.sections.cifar_application`)
all colour a method with :func:`colour`, so a reader who learnt "orange is joint" on one
figure reads every other figure the same way. Joint planning keeps the paper's orange and
the correctly costed eager/whole control its blue; every other method has its own hue,
chosen to stay apart for the common colour-vision deficiencies (Okabe–Ito-like).
"""

from __future__ import annotations

import zlib

__all__ = ["METHOD_COLOURS", "colour"]

#: method -> colour (hex), for every method the paper's cohorts run.
METHOD_COLOURS: dict[str, str] = {
    "joint": "#E07B00",  # orange: the paper's highlight
    "eager_whole": "#1F5FA8",  # blue: the correctly costed control
    "eager": "#6B6B6B",
    "whole": "#009E73",
    "regions": "#CC79A7",
    "functional": "#56B4E9",
    "agnostic": "#7B4FA0",
    "deferred": "#A6761D",
}

#: Colours for methods not listed above (a user's own kind), picked by a stable hash of the
#: name so one method keeps its colour from figure to figure and run to run.
_OTHERS = ("#17BECF", "#BCBD22", "#8C564B", "#E377C2", "#2CA02C", "#D62728", "#9467BD", "#393B79")


def colour(method: str) -> str:
    """The colour of ``method`` (a hex string): the listed one, else a stable pick from a spare set."""
    known = METHOD_COLOURS.get(method)
    return known if known is not None else _OTHERS[zlib.crc32(method.encode()) % len(_OTHERS)]
