"""Cohort kinds: what ONE fresh process of a cohort executes.

A cohort (``conf/cohort/<name>.yaml``) names its ``kind``: a module here
(``stateaware.cohorts.<kind>``), or else any module importable from the directory the
command runs in or from ``PYTHONPATH`` (``kind: mykind`` for ``./mykind.py``,
``kind: mylab.kinds.fast`` for ``./mylab/kinds/fast.py``; see ``examples/custom_cohort/``).
A bare name is looked up here first. A user's kind travels with the run: the source hash
covers its top-level module (the file, or the package folder when dotted), the code
snapshot copies it beside ``stateaware/``, and workers import that copy — so a worker
refuses a kind edited after submission as it refuses drifted library code.

A kind module provides ``run(spec, writer)`` and optionally ``expand``, ``PARAMS``,
``summary`` and ``REPORT``: the contract is ``stateaware.kinds.Kind`` (with ``ProcessSpec``,
``Param`` and the report section's ``ReportSection``), in a leaf that both this package and
the launcher import. ``load_kind`` and its helpers live there too and are re-exported here.

Kinds import the library and the record writer only (a ``summary`` may read the records
back through ``stateaware.analysis``); the launcher never imports a kind
in the submitting process except to read ``PARAMS`` and call ``expand`` and ``summary``.
"""

from stateaware.kinds.loading import kind_module, load_kind, report_sections, user_code

__all__ = ["load_kind", "kind_module", "user_code", "report_sections"]
