"""``preserve="stats"``: running statistics kept by no snapshot, the replay writing a scratch.

NOTE [ Running statistics kept by no snapshot ]

In training mode a batch or instance norm normalises by the statistics of its input
batch; its running statistics are arguments only so that the kernel can update them
(``running = (1 - momentum) * running + momentum * batch``): their values never reach
the output, nor anything the kernel saves for backward that backward reads. A whole
snapshot of them (``"whole"``) exists only so that the replay's second update lands on
a copy instead of the live buffer. So a declared tensor that the segment's forward used
only as a training-mode norm's running statistic, and passed to no other torch call,
needs no snapshot: the replay runs on a scratch tensor of its shape (the live tensor's
``.data`` points at it for the replay's duration, as a whole replay's private copy
does), the norm writes its update there, computes the same output, saves the same
number of tensors (the kernel saves its running-statistics arguments, so they cannot be
withheld as ``None``), and the live statistics keep the single update of the forward.

What counts as "only as a statistic" is ``_reads.Touched.stat_only``: a tensor given to
``batch_norm``/``instance_norm`` in training mode (``_reads._STATS``) that no other call
of the forward touched, before or after; a read (``y = x - self.running_mean``), a
versioned write (``num_batches_tracked.add_(1)``), an eval-mode norm or a compiled region
(``opaque_call``: everything it reaches counts as read) makes it state like any other.
The call shape's first call is recorded, so it is preserved whole and its snapshot
dropped once the forward has shown the tensor to be a statistic only; the calls after it
(``_learned_reads``: same code, modules, training flags, declarations) take no snapshot
at all. Such a call that writes the tensor with a version bump anyway (control flow on
values, outside what a call shape pins) is refused (``ReplayError``) rather than
replayed from a changed value.

Cost: no retained bytes; during a replay, one scratch tensor of the statistic's size
(what a whole replay's private copy costs), uninitialised: its bytes are never read into
the output. ``stateaware.auto`` asks for this mode; ``checkpoint``'s default stays
``"whole"``, whose retained bytes the cohorts' frozen records count.
"""

from __future__ import annotations

import torch

from stateaware.torch_replay._reads import Reads
from stateaware.torch_replay.checkpoint import ReplayError
from stateaware.torch_replay.preserve import _is_wrapper, _Whole

__all__ = ["engine"]


class _Statistic(_Whole):
    """A whole engine whose snapshot is taken in ``prepare`` (before the forward) unless the
    call shape's learned reads say ``live`` is a running statistic only, and dropped in
    ``settle`` (after it) when the recorded forward shows so; without a snapshot its replay
    writes a scratch."""

    kind = "stats"

    def __init__(self, live: torch.Tensor, name: str):
        self.live, self.name = live, name
        self._outside: torch.Tensor | None = None
        self._stand: torch.Tensor | None = None
        self.inner: list[_Whole] = []
        self.stand_in = False
        self.snapshot: torch.Tensor | None = None
        self.retained_bytes = 0
        self.statistic = False
        self._prepared = False  # ``prepare`` decides the snapshot; a replay needs that decision
        self._bump = 0  # versions the learned call's norms advanced ``live`` by
        self._version = live._version
        # a wrapper subclass or a non-leaf with history is preserved through its inner
        # tensors or a stand-in object: always whole
        self._plain = not _is_wrapper(live) and live.grad_fn is None

    def prepare(self, reads: Reads) -> None:
        """Before the forward (Rule 1): no snapshot when a learned call shape says ``live``
        is a running statistic only (``reads.stat_only``), else the whole one."""
        self._prepared = True
        if self._plain and id(self.live) in reads.stat_only:
            self.statistic = True
            self._bump = reads.stat_bumps.get(id(self.live), 0)
        else:
            _Whole.__init__(self, self.live, self.name)

    def settle(self, reads: Reads) -> None:
        """After the forward: drop the snapshot when the forward used ``live`` as a running
        statistic only; refuse a call taken without one that wrote it in place anyway (its
        version moved by more than its norms moved it on the learned call)."""
        if self.statistic:
            if self.live._version != self._version + self._bump:
                raise ReplayError(
                    f"stateaware checkpoint: {self.name} is kept by no snapshot (the first call of this call shape "
                    "used it only as a training-mode norm's running statistic), but this forward wrote it in "
                    f"place (version {self._version} -> {self.live._version}; its norms account for {self._bump}); "
                    "a replay would read the written value. Tip: preserve it 'whole', or "
                    "set_read_recording('every_call')."
                )
            return
        if self._plain and id(self.live) in reads.stat_only:
            self.statistic, self.snapshot, self.retained_bytes = True, None, 0

    def enter(self) -> None:
        if not self._prepared:  # without a snapshot or a scratch the replay would write the live tensor
            raise RuntimeError(f"stateaware checkpoint: the 'stats' engine of {self.name} was not prepared")
        if not self.statistic:
            super().enter()
            return
        # NOTE [ Running statistics kept by no snapshot ]: the norm's update lands here
        self._outside = self.live.data
        self.live.data = torch.empty_like(self._outside)


def engine(live: torch.Tensor, name: str) -> _Statistic:
    """The ``"stats"`` engine for ``live``; its snapshot is decided by ``prepare``."""
    return _Statistic(live, name)
