"""The schemas of the tables the analysis itself writes beside the records.

A results directory holds the record tables (``stateaware.records.schema``) and, once a
report ran, the analysis' own result folders. Each is a DuckDB view of the same name from
the start — empty, with these columns, until something is computed — so a query the
README shows (``SELECT * FROM comparisons``) runs on any results directory. Only pyarrow
here (and the record schema, for the identity columns): :mod:`stateaware.analysis.views` imports
it, and ``analysis sql`` must start fast.
"""

from __future__ import annotations

import pyarrow as pa

from stateaware.records.schema import IDENTITY

__all__ = ["RESULT_TABLES"]

#: ``comparisons``: one row per prespecified comparison of a run
#: (:mod:`stateaware.analysis.comparisons` computes and writes them).
_COMPARISONS = pa.schema(
    [
        *(f for f in IDENTITY if f.name in ("run_id", "cohort")),  # the record tables' own, so joins line up
        pa.field("comparison", pa.string(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("numerator", pa.string(), nullable=False),
        pa.field("denominator", pa.string(), nullable=False),
        pa.field("subset", pa.string()),  # the comparison's `where` as JSON; null for all rows
        pa.field("estimate", pa.float64(), nullable=False),
        pa.field("lower", pa.float64(), nullable=False),
        pa.field("upper", pa.float64(), nullable=False),
        pa.field("confidence", pa.float64(), nullable=False),  # two-sided, = 1 - alpha/m
        pa.field("alpha", pa.float64(), nullable=False),
        pa.field("m", pa.int32(), nullable=False),  # prespecified comparisons in the cohort
        pa.field("draws", pa.int64(), nullable=False),
        pa.field("seed", pa.int64(), nullable=False),
        pa.field("processes", pa.int32(), nullable=False),  # paired processes in this ratio
        pa.field("expected_processes", pa.int32()),  # the run's declared process count
        pa.field("partial", pa.bool_(), nullable=False),
        pa.field("numerator_mean", pa.float64()),  # mean over processes of per-process means
        pa.field("denominator_mean", pa.float64()),
        # A step-time comparison's clock (wall | cpu; stateaware.clocks), and the same ratio on
        # the other clock, shown beside it; null for other metrics.
        pa.field("clock", pa.string()),
        pa.field("other_clock", pa.string()),
        pa.field("other_estimate", pa.float64()),
        pa.field("other_lower", pa.float64()),
        pa.field("other_upper", pa.float64()),
    ]
)

#: folder -> schema of every result table the analysis writes.
RESULT_TABLES: dict[str, pa.Schema] = {"comparisons": _COMPARISONS}
