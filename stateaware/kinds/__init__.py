"""The contract between a cohort kind and the code that runs it.

A cohort names its ``kind``; the run spec checks the kind's ``PARAMS``, the launcher calls
its ``expand`` and records its ``REPORT``, each worker hands its ``run`` a ``ProcessSpec``,
and the report renders the sections the kind named. What both sides must agree on lives
here, in a leaf that imports nothing of stateaware's above it:

- ``ProcessSpec``: what one process is asked to do (pickled to each worker under the name
  ``stateaware.launch.spec.ProcessSpec``; see ``stateaware.kinds.process_spec``);
- ``Param`` and ``check_params``: a kind's declared parameters and their check;
- ``Kind`` and ``ReportSection``: what a kind module and a report section module provide;
- ``load_kind``, ``kind_module``, ``user_code``, ``report_sections``: finding a kind by name.

The kinds stateaware ships are in ``stateaware.cohorts``; a user's own kind is any module
importable from the current directory or ``PYTHONPATH`` (see ``examples/custom_cohort/``).
"""

from stateaware.kinds.loading import OUR_KINDS, kind_module, load_kind, report_sections, user_code
from stateaware.kinds.params import Param, check_params
from stateaware.kinds.process_spec import ProcessSpec
from stateaware.kinds.protocols import Kind, ReportSection

__all__ = [
    "OUR_KINDS",
    "Kind",
    "Param",
    "ProcessSpec",
    "ReportSection",
    "check_params",
    "kind_module",
    "load_kind",
    "report_sections",
    "user_code",
]
