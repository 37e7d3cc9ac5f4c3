"""The Arrow schemas of the tables the analysis itself writes beside the records.

Built from their columns (:mod:`stateaware.analysis.result_columns`, the one definition,
which a reader needing no Arrow imports instead): what the analysis writes them with.
"""

from __future__ import annotations

import pyarrow as pa
from stateaware.analysis.result_columns import RESULT_COLUMNS

from stateaware.records.schema import arrow_schema

__all__ = ["RESULT_TABLES"]

#: folder -> schema of every result table the analysis writes.
RESULT_TABLES: dict[str, pa.Schema] = {name: arrow_schema(columns) for name, columns in RESULT_COLUMNS.items()}
