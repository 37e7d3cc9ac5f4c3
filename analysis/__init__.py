"""The analysis of a results folder: the store's views, the statistics, the report and its sections.

NOTE [ Moved modules keep their old names ]
A module that moved inside the analysis is listed in ``MOVED`` (old dotted name -> new), and
importing the old name gives the very module of the new one: ``import``, ``from OLD import
name`` and ``python -m OLD`` all work, and every object is the same object under both names
(an ``isinstance`` or ``except`` against either agrees). The old name is served here, not by a
file at the old path, so the old path is free and a move is a rename git follows.

The old names are an interface twice over: imports users wrote, and the section modules each
run recorded in its ``runs`` row (``runs.report_sections``), which a report of a results
folder made before a move still names. So an entry is never removed, and
``stateaware.analysis.report`` reads recorded names through ``MOVED`` too.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import CodeType, ModuleType

__all__ = ["MOVED", "current_name"]

#: Old dotted module name -> the module that holds it now (inside the analysis, or below it).
MOVED: dict[str, str] = {
    "stateaware.analysis.views": "stateaware.analysis.store.views",
    "stateaware.analysis.sql": "stateaware.analysis.store.sql",
    "stateaware.analysis.verify": "stateaware.analysis.store.verify",
    "stateaware.analysis.result_tables": "stateaware.records.schema",
    "stateaware.analysis.result_columns": "stateaware.records.columns",
    "stateaware.analysis.stability": "stateaware.analysis.stats.stability",
    "stateaware.analysis.compare": "stateaware.analysis.stats.compare_runs",
    "stateaware.analysis.comparisons": "stateaware.analysis.stats.comparisons",
    "stateaware.analysis.finite": "stateaware.analysis.sections.finite_checks",
    "stateaware.analysis.application": "stateaware.analysis.sections.cifar_application",
    "stateaware.analysis.timing": "stateaware.analysis.sections.timing",
    "stateaware.analysis.timing_rows": "stateaware.analysis.sections.timing_rows",
    "stateaware.analysis.timing_figures": "stateaware.analysis.sections.timing_figures",
    "stateaware.analysis.replay_semantics": "stateaware.analysis.sections.replay_semantics",
    "stateaware.analysis.generic": "stateaware.analysis.sections.generic",
    "stateaware.analysis.sql_files": "stateaware.analysis.sections.queries",
    "stateaware.analysis.run_config": "stateaware.analysis.store.run_config",
    "stateaware.analysis.palette": "stateaware.analysis.figures",
}


def current_name(module: str) -> str:
    """The name ``module`` has today: its ``MOVED`` entry, else itself."""
    return MOVED.get(module, module)


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name of ``MOVED`` and loads it as the module of its new name."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        real = importlib.util.find_spec(MOVED[fullname])
        if real is None:
            return None
        spec = importlib.machinery.ModuleSpec(fullname, self, origin=real.origin)
        spec.has_location = real.has_location  # `python -m OLD` then sees the file's __file__
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__  # the import system overwrites it with ours: put it back below
        return module

    def exec_module(self, module: ModuleType) -> None:
        # Already executed under its new name: only undo the import system's `module.__spec__ = spec`.
        module.__spec__ = module.__spec__.loader_state  # type: ignore[union-attr]

    def get_code(self, fullname: str) -> CodeType | None:
        """The new module's code, which ``python -m OLD`` runs as ``python -m NEW`` would."""
        real = importlib.util.find_spec(MOVED[fullname])
        loader = real.loader if real is not None else None
        return loader.get_code(MOVED[fullname]) if isinstance(loader, importlib.abc.InspectLoader) else None


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())
