"""Forwarding module: the result tables' columns live in ``stateaware.records.columns``.

Kept so that ``from stateaware.analysis.result_columns import RESULT_COLUMNS`` keeps working.
"""

from stateaware.records.columns import RESULT_COLUMNS

__all__ = ["RESULT_COLUMNS"]
