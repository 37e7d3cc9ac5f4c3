"""The named queries in ``analysis/sections/sql/``: run one, get its rows as dicts.

A query takes its lists (method orders) as named parameters (``$methods``), so each list
is spelled once, in the module that owns it, and the SQL file only says where it goes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["SQL_DIR", "rows_of"]

SQL_DIR = Path(__file__).with_name("sql")


def rows_of(con: Any, name: str, **params: Any) -> list[dict[str, Any]]:
    """Rows of ``analysis/sections/sql/<name>.sql`` on ``con``, with ``params`` bound by name."""
    relation = con.execute((SQL_DIR / f"{name}.sql").read_text(), params or None)
    names = [d[0] for d in relation.description]
    return [dict(zip(names, row, strict=True)) for row in relation.fetchall()]
