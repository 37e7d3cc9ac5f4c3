"""``python -m stateaware.cost_runtime.freeze``: profile a cell on this machine and freeze its card.

    python -m stateaware.cost_runtime.freeze --hardware cpu --cell large_sparse
    python -m stateaware.cost_runtime.freeze --hardware cpu --cohort three_workload
    python -m stateaware.cost_runtime.freeze --conf my/conf --hardware cpu --cohort mine

Runs the profiling pass (``stateaware.cost_runtime.profile``) for each named cell (or every
cell of a cohort's grid, ``stateaware.cost_runtime.cells``) on the hardware profile's
device, writes ``conf/cards/<cell>-<digest12>.json`` and prints the digest to put under
``hardware.params.cost_runtime.frozen_cards.<cell>``. Freezing is deliberate: a card is
measured once, reviewed, committed, and then named by digest.

:func:`freeze_cells` takes the hardware profile and cells as data; only :func:`main`
reads config files (``conf/hardware/<name>.yaml`` and ``conf/cohort/<name>.yaml`` of
``--conf``, default the packaged ``conf/``) through ``stateaware.config``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["main", "freeze_cells"]


def freeze_cells(
    hardware: dict[str, Any],
    cells: list[dict[str, Any]],
    *,
    seed: int = 0,
    repeats: int = 5,
    directory: str | None = None,
) -> dict[str, str]:
    """Profile and freeze ``cells`` (``stateaware.cost_runtime.cells.cells_of``) on ``hardware``
    (a resolved hardware profile: its ``scale`` is the one the run records); ``{cell: digest}``."""
    from stateaware.cost_runtime.cells import cost_runtime_of, shape_of
    from stateaware.cost_runtime.frozen_cards import freeze
    from stateaware.cost_runtime.profile import profile_card

    threads = cost_runtime_of(hardware).get("threads")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    out = {}
    for cell in cells:
        doc = profile_card(
            shape_of(cell),
            seed=seed,
            device=hardware.get("device", "cpu"),
            repeats=repeats,
            provenance={
                "cell": cell["cell"],
                "hardware": hardware.get("name"),
                "scale": float(hardware.get("scale", 1.0)),
            },
        )
        path, digest = freeze(doc, cell["cell"], directory)
        print(f"{cell['cell']}: {digest}  ({path})")
        out[cell["cell"]] = digest
    return out


def main(argv: list[str] | None = None) -> int:
    from stateaware.config import ConfigError, conf_file, hardware_file
    from stateaware.cost_runtime.cells import cells_of

    parser = argparse.ArgumentParser(
        prog="python -m stateaware.cost_runtime.freeze", description=__doc__.split("\n")[0]
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


if __name__ == "__main__":
    sys.exit(main())
