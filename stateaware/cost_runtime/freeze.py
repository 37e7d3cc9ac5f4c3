"""``python -m stateaware.cost_runtime.freeze``: profile a cell on this machine and freeze its card.

    python -m stateaware.cost_runtime.freeze --hardware cpu --cell large_sparse
    python -m stateaware.cost_runtime.freeze --hardware cpu --cohort three_workload

Runs the profiling pass (``stateaware.cost_runtime.profile``) for each named cell (or every
cell of a cohort's grid) on the hardware profile's device, writes
``conf/cards/<cell>-<digest12>.json`` and prints the digest to put under
``hardware.params.cost_runtime.frozen_cards.<cell>``. Freezing is deliberate: a card is
measured once, reviewed, committed, and then named by digest.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["main", "freeze_cells"]


def freeze_cells(hardware_name: str, cells: list[str] | None = None, cohort: str | None = None, *,
                 seed: int = 0, repeats: int = 5, directory: str | None = None) -> dict[str, str]:
    """Profile and freeze the named cells (or a cohort's cells); ``{cell: digest}``."""
    from omegaconf import OmegaConf

    import stateaware.conf
    from stateaware.cohorts.timing import _shape, cells_of
    from stateaware.cost_runtime.frozen_cards import freeze
    from stateaware.cost_runtime.profile import profile_card

    conf = Path(stateaware.conf.__file__).parent
    hardware = OmegaConf.to_container(OmegaConf.load(conf / "hardware" / f"{hardware_name}.yaml"), resolve=True)
    params = {"cells": cells} if cells else dict(OmegaConf.to_container(
        OmegaConf.load(conf / "cohort" / f"{cohort}.yaml"), resolve=True)["params"])
    threads = hardware["params"]["cost_runtime"].get("threads")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    scale = float((hardware.get("scales") or {}).get(cohort, hardware.get("scale", 1.0)))  # as the run records it
    out = {}
    for cell in cells_of(params, hardware):
        doc = profile_card(_shape(cell), seed=seed, device=hardware.get("device", "cpu"), repeats=repeats,
                           provenance={"cell": cell["cell"], "hardware": hardware_name,
                                       "scale": scale})
        path, digest = freeze(doc, cell["cell"], directory)
        print(f"{cell['cell']}: {digest}  ({path})")
        out[cell["cell"]] = digest
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stateaware.cost_runtime.freeze", description=__doc__.split("\n")[0])
    parser.add_argument("--hardware", required=True, help="hardware profile: cpu | h100")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--cell", action="append", help="a cell of hardware.params.cost_runtime.cells (repeatable)")
    group.add_argument("--cohort", help="freeze every cell of this cohort's grid (e.g. three_workload)")
    parser.add_argument("--seed", type=int, default=0, help="workload seed of the profiling pass (default 0)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per option; the least is kept (default 5)")
    parser.add_argument("--dir", default=None, help="cards directory (default: conf/cards)")
    args = parser.parse_args(argv)
    freeze_cells(args.hardware, args.cell, args.cohort, seed=args.seed, repeats=args.repeats, directory=args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
