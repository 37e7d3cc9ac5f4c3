"""``python -m stateaware.cost_runtime.freeze``: profile a cell on this machine and freeze its card.

Freezing itself is ``stateaware.cost_runtime.freeze.freeze_cells``, which takes the
hardware profile and cells as data; this command reads them from the config files.
"""

from __future__ import annotations

import argparse

from stateaware.config import ConfigError, conf_file, hardware_file
from stateaware.cost_runtime.cells import cells_of
from stateaware.cost_runtime.freeze import freeze_cells

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Freeze the cells ``--cell`` names, or every cell of ``--cohort``'s grid, on ``--hardware``."""

    parser = argparse.ArgumentParser(
        prog="python -m stateaware.cost_runtime.freeze",
        description="Profile cells of the cost runtime on this machine and freeze their cards under conf/cards.",
    )
    parser.add_argument("--hardware", required=True, help="hardware profile: cpu | h100")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--cell", action="append", help="a cell of hardware.params.cost_runtime.cells (repeatable)")
    group.add_argument("--cohort", help="freeze every cell of this cohort's grid (e.g. three_workload)")
    parser.add_argument(
        "--conf",
        default=None,
        metavar="DIR",
        help="config folder holding hardware/ and cohort/ (default: the packaged conf/)",
    )
    parser.add_argument("--seed", type=int, default=0, help="workload seed of the profiling pass (default 0)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per option; the least is kept (default 5)")
    parser.add_argument("--dir", default=None, help="cards directory (default: conf/cards)")
    args = parser.parse_args(argv)
    try:
        # A cohort with its own byte scale on this profile (hardware.scales) records that
        # scale, as a run of it does (stateaware.config.cohort_scale).
        hardware = hardware_file(args.hardware, args.cohort, conf_dir=args.conf)
        params = {"cells": args.cell} if args.cell else conf_file("cohort", args.cohort, "params", conf_dir=args.conf)
        cells = cells_of(params, hardware)
    except (ConfigError, ValueError) as exc:
        parser.error(str(exc))
    freeze_cells(hardware, cells, seed=args.seed, repeats=args.repeats, directory=args.dir)
    return 0
