"""Finding and importing a cohort kind by the name a cohort gives it.

A bare name (``demo``) is one of ours (``stateaware.cohorts.demo``) when such a module exists,
else a module importable from the current directory or ``PYTHONPATH``; a dotted name
(``mylab.kinds.fast``) is always the user's. Nothing here imports ``stateaware.cohorts``
by name: the kinds are found by ``importlib``, so this leaf sits below the packages that
load kinds (the run spec, the launcher) and the package that holds ours.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import cast

from stateaware.kinds.protocols import Kind

__all__ = ["OUR_KINDS", "kind_module", "user_code", "load_kind", "report_sections"]

#: The package that holds the kinds stateaware ships.
OUR_KINDS = "stateaware.cohorts"


def kind_module(kind: str) -> str:
    """The module name of cohort kind ``kind``: ours (``stateaware.cohorts.<kind>``) when a bare
    name is one of ours, else ``kind`` itself. Imports nothing but ``stateaware.cohorts``."""
    if "." in kind or not kind.isidentifier():
        return kind
    ours = f"{OUR_KINDS}.{kind}"
    return ours if importlib.util.find_spec(ours) is not None else kind


def user_code(kind: str) -> tuple[str, ...]:
    """The top-level module of the user's code that kind ``kind`` runs: ``("mylab",)`` for
    ``mylab.kinds.fast``, ``()`` for a kind of ``stateaware`` (already in the source hash)."""
    top = kind_module(kind).partition(".")[0]
    return () if top == "stateaware" else (top,)


def load_kind(kind: str) -> Kind:
    """Import the module of cohort kind ``kind``; ``ValueError`` naming the kind if absent or
    if it has no ``run`` (the one member a kind must have, see ``Kind``)."""
    name = kind_module(kind)
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name not in (name, *_parents(name)):
            raise
        tried = repr(name) if "." in kind else f"{OUR_KINDS + '.' + kind!r} or {kind!r}"
        raise ValueError(
            f"cohort kind {kind!r}: no module {tried} (a module of stateaware.cohorts, or one "
            f"importable from the current directory {os.getcwd()} or PYTHONPATH); check the "
            f"spelling, or run the command from the folder that holds it"
        ) from None
    if not callable(getattr(module, "run", None)):
        raise ValueError(
            f"cohort kind {kind!r}: module {name!r} ({getattr(module, '__file__', None)}) has no "
            f"run(spec, writer); see stateaware.kinds.Kind for the contract"
        )
    return cast(Kind, module)


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def report_sections(kind: str, module: object) -> tuple[str, ...]:
    """The kind's declared ``REPORT`` section modules (empty when it declares none).

    ``ValueError`` naming the kind when ``REPORT`` is not a tuple or list of module names.
    """
    declared = getattr(module, "REPORT", ())
    if (
        isinstance(declared, str)
        or not isinstance(declared, (tuple, list))
        or not all(isinstance(name, str) and name.strip() for name in declared)
    ):
        raise ValueError(
            f"cohort kind {kind!r}: REPORT must be a tuple of section module names, got {declared!r}; "
            'e.g. REPORT = ("stateaware.analysis.sections.timing",), or leave it out for the generic section'
        )
    return tuple(dict.fromkeys(declared))
