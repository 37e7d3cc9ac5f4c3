"""Transactional activation checkpointing for PyTorch (paper §3.1, §5).

``checkpoint`` is a drop-in for ``torch.utils.checkpoint.checkpoint(use_reentrant=False)``
that restores declared state (whole snapshots or ``Region`` journals) and RNG state
around each replay, and raises ``UndeclaredStateError`` instead of differentiating a
segment that wrote state it did not declare. ``route()`` runs every non-reentrant
``torch.utils.checkpoint`` call in the process on it; ``is_replaying()`` tells hooks
whether they run in a replay.
"""

from stateaware.torch_replay._learned_reads import READ_RECORDING, set_read_recording
from stateaware.torch_replay._replaying import is_replaying
from stateaware.torch_replay._route import ROUTE_STATES, Route, route
from stateaware.torch_replay._transaction import transaction
from stateaware.torch_replay.checkpoint import (
    DETERMINISM_CHECKS,
    ReplayError,
    UndeclaredStateError,
    checkpoint,
)
from stateaware.torch_replay.preserve import PRESERVE_MODES, Region
from stateaware.torch_replay.selective import EXPENSIVE_OPS, keep_expensive

__all__ = [
    "checkpoint",
    "transaction",
    "Region",
    "UndeclaredStateError",
    "ReplayError",
    "PRESERVE_MODES",
    "DETERMINISM_CHECKS",
    "set_read_recording",
    "READ_RECORDING",
    "route",
    "Route",
    "ROUTE_STATES",
    "is_replaying",
    "keep_expensive",
    "EXPENSIVE_OPS",
]
