"""Forwarding module: the result tables' Arrow schemas live in ``stateaware.records.schema``.

Kept so that ``from stateaware.analysis.result_tables import RESULT_TABLES`` keeps working.
"""

from stateaware.records.schema import RESULT_TABLES

__all__ = ["RESULT_TABLES"]
