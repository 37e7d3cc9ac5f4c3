"""What the part check finds, as plain data.

``stateaware.records.check`` computes these (it needs pyarrow);
``stateaware.records.part_cache`` answers them from its cache without it, so a query whose
parts were all checked before never imports Arrow (NOTE [ No Arrow until it reads ] in
``stateaware.analysis.store.views``).
"""

from __future__ import annotations

import os
from typing import NamedTuple

__all__ = ["Content", "Footer"]


class Footer(NamedTuple):
    """What ``stateaware.records.check.part_footer`` found: the problem (``None``: none),
    the renamed columns the part carries under an old name
    (``stateaware.records.check.old_names``; empty when it has a problem), the file's
    ``os.stat`` taken before its footer was read (``None`` when it could not be), and the
    columns of the schema the part lacks (written before they were added; a reader fills
    them with nulls)."""

    problem: str | None
    old_names: dict[str, str]
    stat: os.stat_result | None
    missing: tuple[str, ...] = ()


class Content(NamedTuple):
    """What reading every page of a part found: the problem (``None``: none) and whether
    its pages carry checksums (``False``: only decoding could vouch for them)."""

    problem: str | None
    checksums: bool
