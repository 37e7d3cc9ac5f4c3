"""What a cohort kind module and a report section module provide, as typing protocols.

Both are modules, found by name at run time (a cohort's ``kind``, a kind's ``REPORT``), so
the contract is structural: a module meets it by having the members below. Members a module
may leave out are listed in the docstrings, not in the protocols (a protocol member cannot
be optional); their users read them with ``getattr(module, NAME, default)``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from stateaware.kinds.process_spec import ProcessSpec

__all__ = ["Kind", "ReportSection"]


@runtime_checkable
class Kind(Protocol):
    """A cohort kind: what ONE fresh process of a cohort executes.

    ``run(spec, writer) -> None``
        Execute process ``spec.process_index`` and write its rows with
        ``writer.write(table, rows, part=...)`` (``writer`` is the process's
        ``stateaware.records.RecordWriter``). Part names must be deterministic (e.g. one per
        method), so a retried process replaces rather than duplicates its rows. Raise on
        failure: the worker records the exception as the process's terminal status.

    Optional members:

    ``expand(cohort: dict, hardware: dict, processes: int) -> list[dict]``
        The per-process parameters, one dict per process (merged over ``cohort.params`` into
        ``spec.params``). Without it every process gets ``{}``; the process index and
        ``spec.seed`` tell processes apart.
    ``PARAMS: dict[str, Param]``
        The cohort ``params`` the kind takes (``stateaware.kinds.Param``: type, range,
        allowed values), checked when the run is planned, before any process starts; an
        unknown key is an error. Without it nothing is checked before launch.
    ``summary(out: str, cohort: str) -> str``
        What ``python -m stateaware cohort=NAME`` prints after every process completed.
    ``SUMMARY: str``
        Instead of ``summary``: the module name of a report section whose own
        ``summary(out, cohort)`` prints it. The command line imports it by name after the
        run, so a kind whose summary is the analysis's never imports the analysis (which
        sits above the kinds in the package order).
    ``REPORT: tuple[str, ...]``
        The report sections (module names, each a ``ReportSection``) that render this kind's
        runs; recorded with the run when it is planned, so the report never imports a kind.
        Without it the generic section renders the kind's runs.
    """

    def run(self, spec: ProcessSpec, writer: Any) -> None: ...


@runtime_checkable
class ReportSection(Protocol):
    """A report section: renders the runs of the kinds that name it in their ``REPORT``.

    ``TITLE: str``
        The section's heading.
    ``render(con) -> str``
        Markdown from a DuckDB connection whose views hold only the runs of the kinds that
        name the section.

    Optional: ``figures(con, out_dir) -> list[Path | tuple[Path, str]]`` — figures written
    under ``out_dir``, each a path or a (path, caption) pair.
    """

    TITLE: str

    def render(self, con: Any) -> str: ...
