"""``python -m stateaware.cost_runtime.freeze``: profile a cell on this machine and freeze its card.

    python -m stateaware.cost_runtime.freeze --hardware cpu --cell large_sparse
    python -m stateaware.cost_runtime.freeze --hardware cpu --cohort three_workload
    python -m stateaware.cost_runtime.freeze --conf my/conf --hardware cpu --cohort mine

Runs the profiling pass (``stateaware.cost_runtime.profile``) for each named cell (or every
cell of a cohort's grid, ``stateaware.cost_runtime.cells``) on the hardware profile's
device, writes ``conf/cards/<cell>-<digest12>.json`` and prints the digest to put under
``hardware.params.cost_runtime.frozen_cards.<cell>``. Freezing is deliberate: a card is
measured once, reviewed, committed, and then named by digest.

``freeze_cells`` takes the hardware profile and cells as data; only the command line
(``stateaware.commands.freeze_cards``) reads config files (``conf/hardware/<name>.yaml``
and ``conf/cohort/<name>.yaml`` of ``--conf``, default the packaged ``conf/``) through
``stateaware.config``.
"""

from __future__ import annotations

import sys
from typing import Any

from stateaware.cost_runtime.frozen_cards import freeze

__all__ = ["freeze_cells"]


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
    # lazy: torch (and the cells' numpy) only when cards are measured: --help and an argument error load neither
    from stateaware.cost_runtime.cells import cost_runtime_of, shape_of
    from stateaware.cost_runtime.profile import profile_card

    threads = cost_runtime_of(hardware).get("threads")
    if threads:
        # lazy: torch (and the cells' numpy) only when cards are measured: --help and an argument error load neither
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


if __name__ == "__main__":  # the tool lives with the other command lines
    from stateaware.commands.freeze_cards import main

    sys.exit(main())
