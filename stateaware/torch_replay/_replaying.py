"""Whether the code running now is a checkpoint's replay: ``is_replaying()``.

A replay re-runs the segment's forward, module hooks included, so a hook that observes
(grabs features, counts calls, logs activations) sees every checkpointed module twice per
step — once in the forward, once when backward recomputes it. The replay keeps running
hooks: a hook may also *change* what a module returns, and a replay that skipped it would
recompute other tensors than the forward saved. ``is_replaying()`` lets an observer
tell the two runs apart. The flag is per thread (a replay runs on the thread that runs
the backward), and True inside nested replays too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["is_replaying", "replaying"]

_depth = threading.local()


def is_replaying() -> bool:
    """True while this thread runs a stateaware checkpoint's replay (the recomputation
    backward triggers), False in the original forward and everywhere else.

    For forward hooks and other observers that must count or record each module call once:
    ``if not is_replaying(): features.append(output)``. Torch's own checkpoint recomputes
    without this flag; under ``route`` every non-reentrant
    torch checkpoint is ours, so the flag covers them too.
    """
    return getattr(_depth, "n", 0) > 0


@contextmanager
def replaying() -> Iterator[None]:
    """Mark the body as a replay for ``is_replaying`` (nests)."""
    _depth.n = getattr(_depth, "n", 0) + 1
    try:
        yield
    finally:
        _depth.n -= 1
