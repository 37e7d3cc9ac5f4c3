"""Cohort kinds: what ONE fresh process of a cohort executes.

A cohort (``conf/cohort/<name>.yaml``) names its ``kind``: a module here
(``stateaware.cohorts.<kind>``), or else any module importable from the directory the
command runs in or from ``PYTHONPATH`` (``kind: mykind`` for ``./mykind.py``,
``kind: mylab.kinds.fast`` for ``./mylab/kinds/fast.py``; see ``examples/custom_cohort/``).
A bare name is looked up here first. A user's kind travels with the run: the source hash
covers its top-level module (the file, or the package folder when dotted), the code
snapshot copies it beside ``stateaware/``, and workers import that copy — so a worker
refuses a kind edited after submission as it refuses drifted library code. A kind module
provides

``run(spec: ProcessSpec, writer: RecordWriter) -> None``
    Execute process ``spec.process_index`` and write its rows with
    ``writer.write(table, rows, part=...)``. Part names must be deterministic (e.g. one
    per method), so a retried process replaces rather than duplicates its rows. Raise on
    failure: the worker records the exception as the process's terminal status.

``expand(cohort: dict, hardware: dict, processes: int) -> list[dict]`` (optional)
    The per-process parameters, one dict per process (merged over ``cohort.params``
    into ``spec.params``). Without it every process gets ``{}``; the process index and
    ``spec.seed`` tell processes apart.

``PARAMS: dict[str, stateaware.launch.params.Param]`` (optional)
    The cohort ``params`` the kind takes, with their types, ranges and allowed values.
    The launcher checks ``cohort.params`` against it when the run is planned, before any
    process starts (one line naming ``params.KEY`` and what is allowed); an unknown key
    is an error. Without it, nothing is checked before launch.

``summary(out: str, cohort: str) -> str`` (optional)
    What ``python -m stateaware cohort=NAME`` prints after every process completed (the
    timing cohorts print their per-method table and prespecified ratios).

Kinds import the library and the record writer only (a ``summary`` may read the records
back through ``stateaware.analysis``); the launcher never imports a kind
in the submitting process except to read ``PARAMS`` and call ``expand`` and ``summary``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType

__all__ = ["load_kind", "kind_module", "user_code"]


def kind_module(kind: str) -> str:
    """The module name of cohort kind ``kind``: ours (``stateaware.cohorts.<kind>``) when a bare
    name is one of ours, else ``kind`` itself. Imports nothing but this package."""
    if "." in kind or not kind.isidentifier():
        return kind
    ours = f"{__name__}.{kind}"
    return ours if importlib.util.find_spec(ours) is not None else kind


def user_code(kind: str) -> tuple[str, ...]:
    """The top-level module of the user's code that kind ``kind`` runs: ``("mylab",)`` for
    ``mylab.kinds.fast``, ``()`` for a kind of ``stateaware`` (already in the source hash)."""
    top = kind_module(kind).partition(".")[0]
    return () if top == "stateaware" else (top,)


def load_kind(kind: str) -> ModuleType:
    """Import the module of cohort kind ``kind``; ``ValueError`` naming the kind if absent."""
    name = kind_module(kind)
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name not in (name, *_parents(name)):
            raise
        tried = repr(name) if "." in kind else f"{__name__ + '.' + kind!r} or {kind!r}"
        raise ValueError(f"cohort kind {kind!r}: no module {tried} (a module of stateaware.cohorts, or one "
                         f"importable from the current directory {os.getcwd()} or PYTHONPATH); check the "
                         f"spelling, or run the command from the folder that holds it") from None
    if not callable(getattr(module, "run", None)):
        raise ValueError(f"cohort kind {kind!r}: module {name!r} ({getattr(module, '__file__', None)}) has no "
                         f"run(spec, writer); see stateaware.cohorts for the contract")
    return module


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]
