"""Forwarding module: ``Param`` and ``check_params`` live in ``stateaware.kinds.params``.

Kept for the import path user kinds write (``from stateaware.launch.params import Param``).
"""

from stateaware.kinds.params import Param, check_params

__all__ = ["Param", "check_params"]
