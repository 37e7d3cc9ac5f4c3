"""The columns of the tables the analysis itself writes beside the records, as plain data.

A results directory holds the record tables (``stateaware.records.columns``) and, once a
report ran, the analysis' own result folders. Each is a DuckDB view of the same name from
the start — empty, with these columns, until something is computed — so a query the
README shows (``SELECT * FROM comparisons``) runs on any results directory. Standard
library only: :mod:`stateaware.analysis.views` and ``analysis sql`` read these without
pyarrow; :mod:`stateaware.analysis.result_tables` builds their Arrow schemas.
"""

from __future__ import annotations

from stateaware.records.columns import IDENTITY_COLUMNS, Column, Columns

__all__ = ["RESULT_COLUMNS"]

#: ``comparisons``: one row per prespecified comparison of a run
#: (:mod:`stateaware.analysis.comparisons` computes and writes them).
_COMPARISONS = Columns(
    [
        *(c for c in IDENTITY_COLUMNS if c.name in ("run_id", "cohort")),  # the record tables' own, so joins line up
        Column("comparison", "string", nullable=False),
        Column("metric", "string", nullable=False),
        Column("numerator", "string", nullable=False),
        Column("denominator", "string", nullable=False),
        Column("subset", "string"),  # the comparison's `where` as JSON; null for all rows
        Column("estimate", "double", nullable=False),
        Column("lower", "double", nullable=False),
        Column("upper", "double", nullable=False),
        Column("confidence", "double", nullable=False),  # two-sided, = 1 - alpha/m
        Column("alpha", "double", nullable=False),
        Column("m", "int32", nullable=False),  # prespecified comparisons in the cohort
        Column("draws", "int64", nullable=False),
        Column("seed", "int64", nullable=False),
        Column("processes", "int32", nullable=False),  # paired processes in this ratio
        Column("expected_processes", "int32"),  # the run's declared process count
        Column("partial", "bool", nullable=False),
        Column("numerator_mean", "double"),  # mean over processes of per-process means
        Column("denominator_mean", "double"),
        # A step-time comparison's clock (wall | cpu; stateaware.clocks), and the same ratio on
        # the other clock, shown beside it; null for other metrics.
        Column("clock", "string"),
        Column("other_clock", "string"),
        Column("other_estimate", "double"),
        Column("other_lower", "double"),
        Column("other_upper", "double"),
    ]
)

#: folder -> columns of every result table the analysis writes.
RESULT_COLUMNS: dict[str, Columns] = {"comparisons": _COMPARISONS}
