"""Starting a worker on a code snapshot: verify it first, only then import anything from it.

A worker's interpreter starts with nothing of its snapshot importable: the snapshot is on
no ``PYTHONPATH`` (``stateaware.launch.snapshot.worker_environment``), so Python's
start-up (``site`` importing ``sitecustomize``/``usercustomize``), submitit's own imports and
the unpickling of the job never find a file of it. The callable submitit unpickles is a
``FromSnapshot`` of the *installed* package (the code that launched): it checks the
snapshot against the hash taken at submission (``stateaware.launch.snapshot.snapshot_problems``),
and only then puts the snapshot first on ``sys.path``, forgets the installed ``stateaware``
modules it used to check, and imports the entry point (``run_or_raise``, or the Slurm
task's ``RequeueableProcess``) from the snapshot — an older revision's own entry point when
the snapshot is side B of ``compare_to=``. A snapshot that fails the check is refused with a
``source_drift`` row recorded by the installed code, and nothing of it ran.

NOTE [ Nothing of a snapshot runs before it is verified ]
    What can run at a worker's start: modules Python imports at start-up (``sitecustomize``,
    ``usercustomize``, from any ``sys.path`` folder; ``.pth`` files, from site-packages
    folders only), a file that shadows a module some import reaches first (``json.py``, a
    ``submitit/`` folder), and the module the pickled callable names. None of them can come
    from the snapshot while it is on no path; the snapshot check refuses every file the
    launcher did not put there (a ``json.py`` is "added"), so once it passes, the snapshot
    holds exactly the hashed sources. Limit: a file planted *between* the check and the
    import it feeds (milliseconds) is not seen, as an edit after any check would not be.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any

from submitit.core.utils import DelayedSubmission
from submitit.helpers import Checkpointable

from stateaware.launch.snapshot import snapshot_problems
from stateaware.launch.worker import ProcessFailed, record_drift

__all__ = ["FromSnapshot", "RequeueableFromSnapshot", "enter_snapshot", "ENTRY", "REQUEUEABLE_ENTRY"]

#: What a fresh process runs (``module:attribute`` in the snapshot): one attempt, raising when unsuccessful.
ENTRY = "stateaware.launch.worker:run_or_raise"
#: What a Slurm task runs: a class whose instances are called with the spec.
REQUEUEABLE_ENTRY = "stateaware.launch.slurm:RequeueableProcess"

# The packages a snapshot holds under these names (besides a user's own kind module).
_OURS = "stateaware"


def enter_snapshot(folder: Path | str, source_hash: str) -> str | None:
    """Verify ``folder`` against ``source_hash``, then make it what ``import stateaware`` finds.

    Returns why the snapshot was refused (one line; nothing changed, nothing of it ran), or
    ``None`` once it is first on ``sys.path`` and every ``stateaware`` module this process had
    imported (the installed ones that did the check) is forgotten, so the next import reads
    the snapshot's. Call it before anything imports from the snapshot.
    """
    try:
        problems = snapshot_problems(Path(folder), source_hash)
    except OSError as exc:
        problems = [f"{exc.filename} cannot be read ({exc.strerror})"]
    if problems:
        return f"the code snapshot {folder} is not the one the launcher made: " + ", ".join(problems[:5])
    for name in [n for n in sys.modules if n == _OURS or n.startswith(f"{_OURS}.")]:
        del sys.modules[name]
    sys.path.insert(0, str(folder))
    importlib.invalidate_caches()
    return None


def _entry(folder: str, source_hash: str, entry: str, spec: Any) -> tuple[Any, Any]:
    """The snapshot's ``entry`` and ``spec`` as the snapshot's ``ProcessSpec``; a refused snapshot
    records ``source_drift`` for ``spec`` and raises ``ProcessFailed`` (as ``run_or_raise`` does)."""
    problem = enter_snapshot(folder, source_hash)
    if problem is not None:
        raise ProcessFailed(
            record_drift(
                spec, f"source drift: {problem}; re-run the cohort command (the launcher rebuilds the snapshot)"
            )
        )
    module, _, attribute = entry.partition(":")
    target = getattr(importlib.import_module(module), attribute)
    # The spec was unpickled as the installed ProcessSpec; the snapshot's code gets its own
    # (the same fields: the launcher refuses a compare_to tree whose spec differs).
    theirs = importlib.import_module("stateaware.launch.spec").ProcessSpec
    return target, theirs(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)})


@dataclasses.dataclass(frozen=True)
class FromSnapshot:
    """The callable a local worker is submitted: ``entry`` of the snapshot ``folder``, after checking it.

    Pickled by reference to this installed module, so unpickling it imports nothing of the
    snapshot (NOTE [ Nothing of a snapshot runs before it is verified ]).
    """

    folder: str
    source_hash: str
    entry: str = ENTRY

    def __call__(self, spec: Any) -> Any:
        target, spec = _entry(self.folder, self.source_hash, self.entry, spec)
        return target(spec)


class RequeueableFromSnapshot(Checkpointable):
    """A Slurm task's callable: ``REQUEUEABLE_ENTRY`` of the snapshot, after checking it, and
    requeued as itself — so a requeued attempt checks the snapshot again before importing it.

    Requeue is refused once the snapshot's task has recorded its end (its ``_ended``) or the
    snapshot was refused: a failed or drifted task stays failed.
    """

    def __init__(self, folder: str, source_hash: str, entry: str = REQUEUEABLE_ENTRY) -> None:
        self.folder, self.source_hash, self.entry = folder, source_hash, entry
        self._task: Any = None
        self._refused = False

    def __call__(self, spec: Any) -> Any:
        try:
            task_class, spec = _entry(self.folder, self.source_hash, self.entry, spec)
        except BaseException:
            self._refused = True
            raise
        self._task = task_class()
        return self._task(spec)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:  # a DelayedSubmission, or None: no requeue
        """submitit's requeue on preemption or the time limit: this callable again, unless the attempt ended."""
        if self._refused or getattr(self._task, "_ended", False):
            return None
        return DelayedSubmission(self, *args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        # The snapshot's task object is never pickled: a requeued attempt starts from the check.
        return {"folder": self.folder, "source_hash": self.source_hash, "entry": self.entry}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _task=None, _refused=False)
