"""Forwarding module: the run lock lives in ``stateaware.records.runlock``.

Kept so that ``from stateaware.launch.runlock import run_lock`` keeps working.
"""

from stateaware.records.runlock import RunLocked, TamperedPath, describe_entry, launcher_folder, lock_path, run_lock

__all__ = ["RunLocked", "TamperedPath", "describe_entry", "launcher_folder", "lock_path", "run_lock"]
