"""Cohort kinds: what ONE fresh process of a cohort executes.

A cohort (``conf/cohort/<name>.yaml``) names its ``kind``: a module here
(``stateaware.cohorts.<kind>``) or any importable dotted module path. A kind module
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
    ``("stateaware.analysis.timing",)``, or a module of your own). The launcher records
    them with the kind in the run's ``runs`` row when the run is planned, so the report
    picks sections by what each run recorded and never imports a kind (a kind may import
    torch; the analysis must not). Several kinds naming one section render it once, over
    all their runs. A section module provides ``TITLE: str``, ``render(con) -> str``
    (Markdown from a DuckDB connection whose views hold only the runs of the kinds that
    name it) and optionally ``figures(con, out_dir) -> list[Path]``.

    Without ``REPORT`` a kind still gets a section (``stateaware.analysis.generic``,
    titled by its cohorts and kind): when its processes wrote ``timings`` rows, a
    per-method table (median measured step time on the run's declared clock, the other
    clock beside it, peak allocated bytes where recorded) and the cohort's prespecified
    ``comparisons`` with their intervals; otherwise one line counting its rows per table.

Kinds import the library and the record writer only (a ``summary`` may read the records
back through ``stateaware.analysis``); the launcher never imports a kind
in the submitting process except to call ``expand`` and ``summary``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["load_kind", "report_sections"]


def load_kind(kind: str) -> ModuleType:
    """Import the module of cohort kind ``kind``; ``ValueError`` naming the kind if absent."""
    name = kind if "." in kind else f"{__name__}.{kind}"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name not in (name, *_parents(name)):
            raise
        raise ValueError(f"cohort kind {kind!r}: no module {name!r}") from None
    if not callable(getattr(module, "run", None)):
        raise ValueError(f"cohort kind {kind!r}: module {name!r} has no run(spec, writer)")
    return module


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def report_sections(kind: str, module: ModuleType) -> tuple[str, ...]:
    """The kind's declared ``REPORT`` section modules (empty when it declares none).

    ``ValueError`` naming the kind when ``REPORT`` is not a tuple or list of module names.
    """
    declared = getattr(module, "REPORT", ())
    if isinstance(declared, str) or not isinstance(declared, (tuple, list)) or not all(
            isinstance(name, str) and name.strip() for name in declared):
        raise ValueError(f"cohort kind {kind!r}: REPORT must be a tuple of section module names, got {declared!r}; "
                         "e.g. REPORT = (\"stateaware.analysis.timing\",), or leave it out for the generic section")
    return tuple(dict.fromkeys(declared))
