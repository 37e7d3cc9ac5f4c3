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

``REPORT: tuple[str, ...]`` (optional)
    The report sections that render this kind's runs: importable module names (e.g.
    ``("stateaware.analysis.sections.timing",)``, or a module of your own). The launcher records
    them with the kind in the run's ``runs`` row when the run is planned, so the report
    picks sections by what each run recorded and never imports a kind (a kind may import
    torch; the analysis must not). Several kinds naming one section render it once, over
    all their runs. A section module provides ``TITLE: str``, ``render(con) -> str``
    (Markdown from a DuckDB connection whose views hold only the runs of the kinds that
    name it) and optionally ``figures(con, out_dir) -> list[Path]``.

    Without ``REPORT`` a kind still gets a section (``stateaware.analysis.sections.generic``,
    titled by its cohorts and kind): when its processes wrote ``timings`` rows, a
    per-method table (median measured step time on the run's declared clock, the other
    clock beside it, peak allocated bytes where recorded) and the cohort's prespecified
    ``comparisons`` with their intervals; otherwise one line counting its rows per table.

Kinds import the library and the record writer only (a ``summary`` may read the records
back through ``stateaware.analysis``); the launcher never imports a kind
in the submitting process except to read ``PARAMS`` and call ``expand`` and ``summary``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType

__all__ = ["load_kind", "kind_module", "user_code", "report_sections"]


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
        raise ValueError(
            f"cohort kind {kind!r}: no module {tried} (a module of stateaware.cohorts, or one "
            f"importable from the current directory {os.getcwd()} or PYTHONPATH); check the "
            f"spelling, or run the command from the folder that holds it"
        ) from None
    if not callable(getattr(module, "run", None)):
        raise ValueError(
            f"cohort kind {kind!r}: module {name!r} ({getattr(module, '__file__', None)}) has no "
            f"run(spec, writer); see stateaware.cohorts for the contract"
        )
    return module


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def report_sections(kind: str, module: ModuleType) -> tuple[str, ...]:
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
