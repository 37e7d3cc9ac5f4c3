"""The timing protocol's cells: grids, cell -> shape, cards, and where a budget lands.

A *cell* is one workload shape a timing process measures (paper §8–§11). Everything here
takes plain dicts — a hardware profile (``{"name", "device", "scale", "params":
{"cost_runtime": {...}}}``) and a cohort's ``params`` — and never reads ``conf/`` itself,
so the same functions serve the timing cohort kind, the freeze command and a notebook.
Nothing here imports torch: planning a run expands cells without it.

The profile's ``cost_runtime`` section (``conf/hardware/*.yaml`` documents each field):
``cells`` (name -> shape fields), ``granularity_bytes``, ``calibration`` and
``three_workload`` (the two grids), ``budget_rule`` (``absolute`` | ``relative``),
``byte_scale``, ``frozen_cards`` (cell -> digest), ``cards_dir``, ``profile_repeats``,
``overrides`` (cohort -> reduced params).
"""

from __future__ import annotations

from typing import Any

from stateaware.cost_runtime.frozen_cards import FrozenCardError, load_frozen
from stateaware.cost_runtime.plans import budget_at, position_of
from stateaware.planner.profile_card import card_from_dict

__all__ = [
    "GRIDS",
    "WORKLOADS",
    "cost_runtime_of",
    "cells_of",
    "named_cell",
    "effective_params",
    "check_references",
    "process_cells",
    "shape_of",
    "card_for",
    "anchor_cell_of",
    "place_budget",
]

#: The grids a cohort may name instead of listing cells (``params.grid``).
GRIDS = ("calibration", "three_workload")

#: The three workloads, in the order grids list them (``stateaware.cost_runtime.workloads``).
WORKLOADS = ("feature_queue", "prototype_memory", "unrolled_recurrence")

_GIB = 1 << 30


def cost_runtime_of(hardware: dict[str, Any]) -> dict[str, Any]:
    """The profile's ``params.cost_runtime`` section; ``ValueError`` if it has none."""
    section = (hardware.get("params") or {}).get("cost_runtime")
    if not section:
        raise ValueError(
            f"hardware profile {hardware.get('name')!r} has no params.cost_runtime section "
            "(cells, granularity, budget rule); valid profiles with one: cpu, h100"
        )
    return section


def named_cell(name: str, hardware: dict[str, Any]) -> dict[str, Any]:
    """The cell ``name`` of the profile's ``cost_runtime.cells``: ``cell`` plus its shape fields."""
    section = cost_runtime_of(hardware)
    if name not in section["cells"]:
        raise ValueError(
            f"cell {name!r} is not in hardware.params.cost_runtime.cells; valid cells are: "
            f"{', '.join(section['cells'])}"
        )
    return {"cell": name, "granularity_bytes": int(section["granularity_bytes"]), **section["cells"][name]}


def cells_of(cohort_params: dict[str, Any], hardware: dict[str, Any]) -> list[dict[str, Any]]:
    """Every cell of a cohort on ``hardware``: dicts with ``cell`` and the shape fields.

    ``cohort_params`` names a ``grid`` (one of ``GRIDS``) or lists ``cells``; an unknown
    grid or cell, or neither, is a ``ValueError`` naming the valid ones.
    """
    section = cost_runtime_of(hardware)
    grid = cohort_params.get("grid")
    granularity = int(section["granularity_bytes"])
    if grid == "calibration":
        cal = section["calibration"]
        out = []
        for workload in WORKLOADS:
            for mib, buffer_bytes in sorted(((int(k), int(v)) for k, v in cal["buffers"].items())):
                for fraction in (0.001, 1.0):
                    for live in (1, 64):
                        out.append(
                            {
                                "cell": f"{workload}-{mib}MiB-f{fraction:g}-l{live}",
                                "workload": workload,
                                "buffer_bytes": buffer_bytes,
                                "write_fraction": fraction,
                                "live_segments": live,
                                "granularity_bytes": granularity,
                                "width": int(cal["width"]),
                                "batch": int(cal["batch"]),
                                "rank": int(cal["rank"]),
                            }
                        )
        return out
    if grid == "three_workload":
        tw = section["three_workload"]
        return [
            {
                "cell": workload,
                "workload": workload,
                "buffer_bytes": int(tw["buffer_bytes"]),
                "write_fraction": float(tw["write_fraction"]),
                "live_segments": int(tw["live_segments"]),
                "granularity_bytes": granularity,
                "width": int(tw["width"]),
                "batch": int(tw["batch"]),
                "rank": int(tw["rank"]),
            }
            for workload in WORKLOADS
        ]
    if grid is not None:
        raise ValueError(f"params.grid={grid!r}; valid grids are: {', '.join(GRIDS)} (or give params.cells)")
    out = [named_cell(name, hardware) for name in cohort_params.get("cells") or []]
    if not out:
        raise ValueError("a timing cohort needs params.cells or params.grid")
    return out


def effective_params(cohort: dict[str, Any], hardware: dict[str, Any]) -> dict[str, Any]:
    """The cohort's params with the profile's reductions applied (``cost_runtime.overrides.<cohort>``);
    ``reduced_from`` keeps the values they replaced."""
    params = dict(cohort.get("params") or {})
    reduced = (cost_runtime_of(hardware).get("overrides") or {}).get(cohort["name"]) or {}
    if reduced:
        params["reduced_from"] = {k: params.get(k) for k in reduced}
        params.update(reduced)
    return params


def check_references(params: dict[str, Any], hardware: dict[str, Any], cells: list[dict[str, Any]]) -> None:
    """``ValueError`` naming the first thing the cohort's ``params`` refer to that does not exist.

    Checked before launch, so a typo fails once in the submitting process instead of in
    every process: ``anchor_cell`` names a cell of the profile; ``anchor_gib``, when given,
    holds exactly ``min_eager_whole`` and ``eager``, finite and positive, with ``eager`` above
    ``min_eager_whole`` (otherwise no budget position is defined); every frozen card the
    ``cells`` use (``card: frozen`` or ``auto``) exists and still hashes to its digest, and
    ``card: frozen`` has one named for every cell.
    """
    anchor = params.get("anchor_cell")
    if anchor is not None:
        try:
            named_cell(str(anchor), hardware)
        except ValueError as exc:
            raise ValueError(f"params.anchor_cell={anchor!r}: {exc}") from None
    if "anchor_gib" in params:
        given = params["anchor_gib"]
        keys = ("min_eager_whole", "eager")
        numbers = isinstance(given, dict) and sorted(given) == sorted(keys)
        values = [given[k] for k in keys] if numbers else []
        if not (
            numbers
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf") for v in values)
            and values[1] > values[0]
        ):
            raise ValueError(
                f"params.anchor_gib={given!r}: allowed values are a mapping of exactly min_eager_whole and eager, "
                "in GiB, finite, with 0 < min_eager_whole < eager (the paper's anchors of the budget's position)"
            )
    mode = params.get("card", "auto")
    if mode == "measure":
        return
    section = cost_runtime_of(hardware)
    named = section.get("frozen_cards") or {}
    for cell in cells:
        digest = named.get(cell["cell"])
        if digest is None:
            if mode == "frozen":
                raise ValueError(
                    f"params.card=frozen, but hardware profile {hardware.get('name')!r} names no frozen card for "
                    f"cell {cell['cell']!r} (hardware.params.cost_runtime.frozen_cards.{cell['cell']})"
                )
            continue
        try:
            load_frozen(str(digest), section.get("cards_dir"))
        except (FrozenCardError, ValueError) as exc:  # missing, edited, or not a card (CardError)
            raise ValueError(f"cell {cell['cell']!r}: {exc}") from None


def process_cells(cohort_params: dict[str, Any], hardware: dict[str, Any], processes: int) -> list[dict[str, Any]]:
    """The cell of each of ``processes`` processes: cycled through the cohort's cells, except
    that ``grid: three_workload`` gives each workload a contiguous block of processes."""
    cells = cells_of(cohort_params, hardware)
    if cohort_params.get("grid") == "three_workload":
        return [cells[min(i * len(cells) // processes, len(cells) - 1)] for i in range(processes)]
    return [cells[i % len(cells)] for i in range(processes)]


def shape_of(cell: dict[str, Any]) -> Any:
    """The ``stateaware.cost_runtime.workloads.Shape`` of a cell (imports torch)."""
    from stateaware.cost_runtime.workloads import Shape  # lazy: it imports torch; planning a run does not

    return Shape(
        workload=cell["workload"],
        buffer_bytes=int(cell["buffer_bytes"]),
        write_fraction=float(cell["write_fraction"]),
        live_segments=int(cell["live_segments"]),
        granularity_bytes=int(cell["granularity_bytes"]),
        width=int(cell["width"]),
        batch=int(cell["batch"]),
        rank=int(cell["rank"]),
    )


def card_for(
    cell: dict[str, Any], mode: str, hardware: dict[str, Any], *, seed: int, cohort: str, device: str
) -> tuple[Any, bool]:
    """``(card, measured_here)`` for ``cell``: the frozen card the profile names, or a fresh
    profiling pass in this process.

    ``mode`` is ``frozen`` (refuse without a frozen card), ``auto`` (frozen if named, else
    measure) or ``measure``. A frozen card measured for another shape than the cell's is
    refused (``FrozenCardError``): its costs would describe another program.
    """

    section = cost_runtime_of(hardware)
    name = cell["cell"]
    hardware_name = str(hardware.get("name", "cpu"))  # as ProcessSpec.hardware_name
    digest = (section.get("frozen_cards") or {}).get(name)
    if mode not in ("frozen", "auto", "measure"):
        raise ValueError(f"params.card={mode!r}; valid values are: frozen, auto, measure")
    if digest and mode != "measure":
        card = load_frozen(str(digest), section.get("cards_dir"))
        frozen_shape = dict(card.provenance.get("shape") or {})
        want = shape_of(cell).to_dict()
        if frozen_shape != want:
            raise FrozenCardError(
                f"frozen card {str(digest)[:12]} was measured for shape {frozen_shape}, but cell "
                f"{name!r} on this profile is {want}; freeze a card for this shape"
            )
        return card, False
    if mode == "frozen":
        raise FrozenCardError(
            f"cohort {cohort!r} runs on a frozen card, and hardware profile "
            f"{hardware_name!r} names none for cell {name!r} "
            f"(hardware.params.cost_runtime.frozen_cards.{name}); freeze one first: "
            f"python -m stateaware.cost_runtime.freeze --cell {name} --hardware {hardware_name}"
        )
    from stateaware.cost_runtime.profile import profile_card  # lazy: it imports torch; planning a run does not

    doc = profile_card(
        shape_of(cell),
        seed=seed,
        device=device,
        repeats=int(section.get("profile_repeats", 5)),
        provenance={
            "cell": name,
            "cohort": cohort,
            "hardware": hardware_name,
            "scale": float(hardware.get("scale", 1.0)),
        },
    )
    return card_from_dict(doc), True


def anchor_cell_of(params: dict[str, Any], hardware: dict[str, Any], cell: dict[str, Any]) -> dict[str, Any] | None:
    """The cell whose card places the budget, when it is not ``cell`` itself; else None.

    Only a relative placement (``params.placement: relative`` on a profile with
    ``budget_rule: relative``) uses an anchor, and only ``params.anchor_cell`` names another.
    """
    section = cost_runtime_of(hardware)
    anchor = params.get("anchor_cell")
    if (
        anchor
        and anchor != cell["cell"]
        and params.get("placement", "relative") == "relative"
        and section.get("budget_rule") == "relative"
    ):
        return named_cell(anchor, hardware)
    return None


def place_budget(params: dict[str, Any], hardware: dict[str, Any], anchor_card: Any) -> int:
    """The budget in bytes for the cohort's ``budget_gib`` on this profile.

    At ``budget_rule: absolute`` it is ``budget_gib`` GiB. At ``relative``, placement
    ``scaled`` multiplies by ``byte_scale``; ``relative`` puts the budget at the paper
    budget's position between ``anchor_gib`` on ``anchor_card`` (NOTE [ Budget positions ]
    in ``stateaware.cost_runtime.plans``).
    """
    section = cost_runtime_of(hardware)
    gib = float(params["budget_gib"])
    if section.get("budget_rule", "absolute") == "absolute":
        return int(gib * _GIB)
    placement = params.get("placement", "relative")
    if placement == "scaled":
        return int(gib * _GIB * float(section["byte_scale"]))
    if placement != "relative":
        raise ValueError(f"params.placement={placement!r}; valid placements are: relative, scaled")
    anchor = params["anchor_gib"]
    return budget_at(anchor_card, position_of(gib, float(anchor["min_eager_whole"]), float(anchor["eager"])))
