"""The timing cohort kind: profile or load a card, plan, check, then time every method.

One process runs one workload cell (paper §8–§11): it obtains the cell's profile card
(the frozen card its hardware profile names, or a profiling pass in this process), places
the budget, plans every method on the card, records the plans (``policies``; infeasible
plans included, never executed), runs the FP32/FP64 semantic checks (``records``), and
times each executable method that passed both: warm-ups, measured steps and the measured
peak of one extra step (``timings``).

Cohort ``params`` (see ``conf/cohort/{calibration,pressure,fair44,confirm44,confirm32,
three_workload}.yaml``):

``cells``        cell names from the hardware profile's ``cost_runtime.cells`` (one per process,
                 cycled), or ``grid: calibration`` / ``grid: three_workload``.
``methods``      method names (``stateaware.cost_runtime.METHODS``).
``budget_gib``   the paper's budget; ``placement`` says how a profile turns it into bytes:
                 ``relative`` (at ``hardware.cost_runtime.budget_rule: relative``, the budget's
                 position between the paper anchors ``anchor_gib`` is applied to the
                 ``anchor_cell``'s card; NOTE [ Budget positions ] in ``cost_runtime.plans``)
                 or ``scaled`` (``budget_gib`` times ``cost_runtime.byte_scale``). At
                 ``budget_rule: absolute`` (h100) the budget is ``budget_gib`` GiB.
``card``         ``frozen`` (refuse to run without the frozen card the profile names),
                 ``auto`` (frozen if named, else measure) or ``measure``.
``shuffle``      run the methods in an order drawn from the process seed (default true).
``warmup``, ``steps``  per method; ``hardware.cost_runtime.overrides.<cohort>`` may reduce them
                 on a profile (recorded in the policies rows' detail and by the report).
"""

from __future__ import annotations

from typing import Any

from stateaware.cost_runtime import METHODS
from stateaware.launch.spec import ProcessSpec
from stateaware.launch.params import Param
from stateaware.records.writer import RecordWriter


#: Checked when the run is planned (stateaware.launch.params); see the module docstring.
PARAMS = {
    "grid": Param(str, choices=("calibration", "three_workload")),
    "cells": Param(list, item=str),
    "methods": Param(list, item=str, choices=METHODS),
    "budget_gib": Param(float, minimum=0, required=True),
    "placement": Param(str, choices=("relative", "scaled")),
    "anchor_cell": Param(str),
    "anchor_gib": Param(dict),
    "card": Param(str, choices=("frozen", "auto", "measure")),
    "shuffle": Param(bool),
    "warmup": Param(int, minimum=0, required=True),
    "steps": Param(int, minimum=1, required=True),
}

__all__ = ["METHODS", "PARAMS", "expand", "run", "summary", "cells_of", "effective_params"]

#: The report section that renders this kind (cohorts/__init__.py, REPORT).
REPORT = ("stateaware.analysis.timing",)

_GIB = 1 << 30


def _cost_runtime(hardware: dict[str, Any]) -> dict[str, Any]:
    cost_runtime = (hardware.get("params") or {}).get("cost_runtime")
    if not cost_runtime:
        raise ValueError(f"hardware profile {hardware.get('name')!r} has no params.cost_runtime section "
                         "(cells, granularity, budget rule); valid profiles with one: cpu, h100")
    return cost_runtime


def cells_of(cohort_params: dict[str, Any], hardware: dict[str, Any]) -> list[dict[str, Any]]:
    """Every cell of the cohort on ``hardware``: dicts with ``cell`` and the shape fields."""
    cost_runtime = _cost_runtime(hardware)
    grid = cohort_params.get("grid")
    granularity = int(cost_runtime["granularity_bytes"])
    if grid == "calibration":
        cal = cost_runtime["calibration"]
        out = []
        for workload in ("feature_queue", "prototype_memory", "unrolled_recurrence"):
            for mib, buffer_bytes in sorted(((int(k), int(v)) for k, v in cal["buffers"].items())):
                for fraction in (0.001, 1.0):
                    for live in (1, 64):
                        out.append({"cell": f"{workload}-{mib}MiB-f{fraction:g}-l{live}", "workload": workload,
                                    "buffer_bytes": buffer_bytes, "write_fraction": fraction, "live_segments": live,
                                    "granularity_bytes": granularity, "width": int(cal["width"]),
                                    "batch": int(cal["batch"]), "rank": int(cal["rank"])})
        return out
    if grid == "three_workload":
        tw = cost_runtime["three_workload"]
        return [{"cell": workload, "workload": workload, "buffer_bytes": int(tw["buffer_bytes"]),
                 "write_fraction": float(tw["write_fraction"]), "live_segments": int(tw["live_segments"]),
                 "granularity_bytes": granularity, "width": int(tw["width"]), "batch": int(tw["batch"]),
                 "rank": int(tw["rank"])}
                for workload in ("feature_queue", "prototype_memory", "unrolled_recurrence")]
    if grid is not None:
        raise ValueError(f"params.grid={grid!r}; valid grids are: calibration, three_workload (or give params.cells)")
    out = []
    for name in cohort_params.get("cells") or []:
        if name not in cost_runtime["cells"]:
            raise ValueError(f"cell {name!r} is not in hardware.params.cost_runtime.cells; valid cells are: "
                             f"{', '.join(cost_runtime['cells'])}")
        out.append({"cell": name, "granularity_bytes": granularity, **cost_runtime["cells"][name]})
    if not out:
        raise ValueError("a timing cohort needs params.cells or params.grid")
    return out


def effective_params(cohort: dict[str, Any], hardware: dict[str, Any]) -> dict[str, Any]:
    """The cohort's params with the profile's reductions applied (``cost_runtime.overrides``)."""
    params = dict(cohort.get("params") or {})
    reduced = (_cost_runtime(hardware).get("overrides") or {}).get(cohort["name"]) or {}
    if reduced:
        params["reduced_from"] = {k: params.get(k) for k in reduced}
        params.update(reduced)
    return params


def expand(cohort: dict[str, Any], hardware: dict[str, Any], processes: int) -> list[dict[str, Any]]:
    """One cell per process (cycled through the cohort's cells), plus the effective params."""
    params = effective_params(cohort, hardware)
    cells = cells_of(params, hardware)
    out = []
    for i in range(processes):
        cell = cells[i % len(cells)] if params.get("grid") != "three_workload" else \
            cells[min(i * len(cells) // processes, len(cells) - 1)]
        out.append({**{k: v for k, v in params.items() if k not in ("cells",)}, "cell": cell})
    return out


def _shape(cell: dict[str, Any]):
    from stateaware.cost_runtime.workloads import Shape

    return Shape(workload=cell["workload"], buffer_bytes=int(cell["buffer_bytes"]),
                 write_fraction=float(cell["write_fraction"]), live_segments=int(cell["live_segments"]),
                 granularity_bytes=int(cell["granularity_bytes"]), width=int(cell["width"]),
                 batch=int(cell["batch"]), rank=int(cell["rank"]))


def _card(name: str, cell: dict[str, Any], mode: str, cost_runtime: dict[str, Any], spec: ProcessSpec, device: str):
    """``(card, measured_here)``: the frozen card for ``name``, or a fresh profiling pass."""
    from stateaware.cost_runtime.frozen_cards import FrozenCardError, load_frozen
    from stateaware.planner.profile_card import card_from_dict

    digest = (cost_runtime.get("frozen_cards") or {}).get(name)
    if mode not in ("frozen", "auto", "measure"):
        raise ValueError(f"params.card={mode!r}; valid values are: frozen, auto, measure")
    if digest and mode != "measure":
        card = load_frozen(str(digest), cost_runtime.get("cards_dir"))
        frozen_shape = dict(card.provenance.get("shape") or {})
        want = _shape(cell).to_dict()
        if frozen_shape != want:
            raise FrozenCardError(f"frozen card {str(digest)[:12]} was measured for shape {frozen_shape}, but cell "
                                  f"{name!r} on this profile is {want}; freeze a card for this shape")
        return card, False
    if mode == "frozen":
        raise FrozenCardError(f"cohort {spec.cohort!r} runs on a frozen card, and hardware profile "
                              f"{spec.hardware_name!r} names none for cell {name!r} "
                              f"(hardware.params.cost_runtime.frozen_cards.{name}); freeze one first: "
                              f"python -m stateaware.cost_runtime.freeze --cell {name} --hardware {spec.hardware_name}")
    from stateaware.cost_runtime.profile import profile_card

    doc = profile_card(_shape(cell), seed=spec.seed, device=device, repeats=int(cost_runtime.get("profile_repeats", 5)),
                       provenance={"cell": name, "cohort": spec.cohort, "hardware": spec.hardware_name,
                                   "scale": spec.scale})
    return card_from_dict(doc), True


def _budget(params: dict[str, Any], cost_runtime: dict[str, Any], anchor_card: Any) -> int:
    from stateaware.cost_runtime.plans import budget_at, position_of

    gib = float(params["budget_gib"])
    if cost_runtime.get("budget_rule", "absolute") == "absolute":
        return int(gib * _GIB)
    placement = params.get("placement", "relative")
    if placement == "scaled":
        return int(gib * _GIB * float(cost_runtime["byte_scale"]))
    if placement != "relative":
        raise ValueError(f"params.placement={placement!r}; valid placements are: relative, scaled")
    anchor = params["anchor_gib"]
    return budget_at(anchor_card, position_of(gib, float(anchor["min_eager_whole"]), float(anchor["eager"])))


def _profile_rows(card: Any, columns: dict[str, Any]) -> list[dict[str, Any]]:
    import json

    rows = []
    for index, segment in enumerate(card.segments):
        for option, cost in segment.items():
            rows.append({"card_digest": card.digest, "segment": index, "option": option,
                         "retained_bytes": cost.retained_bytes, "temp_bytes": cost.temp_bytes, "ms": cost.ms,
                         "persistent_bytes": card.persistent_bytes,
                         "provenance_json": json.dumps(dict(card.provenance), sort_keys=True, default=str),
                         **columns})
    return rows


def run(spec: ProcessSpec, writer: RecordWriter) -> None:
    """One timing process; the profile's thread count applies inside it only (an inline run
    leaves its caller's setting as it was). A fresh process keeps the count until it exits,
    so its ``processes`` row records the threads it timed with (``torch_threads``)."""
    import torch

    threads = torch.get_num_threads()
    try:
        _run(spec, writer)
    finally:
        if spec.launcher == "inline":
            torch.set_num_threads(threads)


def _run(spec: ProcessSpec, writer: RecordWriter) -> None:
    import dataclasses
    import json
    import random

    import torch

    from stateaware.clocks import timing_rows
    from stateaware.cost_runtime.plans import plan_methods
    from stateaware.cost_runtime.runner import semantic_checks
    from stateaware.cost_runtime.runner import measure as measure_method

    params = spec.params
    cost_runtime = _cost_runtime(spec.hardware)
    if cost_runtime.get("threads"):
        torch.set_num_threads(int(cost_runtime["threads"]))
    device = str(spec.hardware.get("device", "cpu"))
    cell = params["cell"]
    name = cell["cell"]
    methods = list(params.get("methods") or METHODS)
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"params.methods has {unknown}; valid methods are: {', '.join(METHODS)}")
    shape = _shape(cell)
    mode = str(params.get("card", "auto"))

    card, measured_here = _card(name, cell, mode, cost_runtime, spec, device)
    anchor_name = params.get("anchor_cell")
    if anchor_name and anchor_name != name and params.get("placement", "relative") == "relative" \
            and cost_runtime.get("budget_rule") == "relative":
        anchor_cell = {"cell": anchor_name, "granularity_bytes": int(cost_runtime["granularity_bytes"]),
                       **cost_runtime["cells"][anchor_name]}
        anchor_card, _ = _card(anchor_name, anchor_cell, "auto", cost_runtime, spec, device)
    else:
        anchor_card = card
    budget = _budget(params, cost_runtime, anchor_card)
    columns = {**shape.columns(), "cell": name, "budget_bytes": int(budget)}
    plans = plan_methods(card, budget, methods)

    warmup, steps = int(params["warmup"]), int(params["steps"])
    note = {"warmup": warmup, "steps": steps, "shuffle": bool(params.get("shuffle", True)), "reduced_from": params.get("reduced_from"),
            "card_source": "measured_in_process" if measured_here else "frozen", "byte_scale": cost_runtime.get("byte_scale")}
    writer.write("policies", [{"method": m, **{k: v for k, v in row.items()}, **columns} for m, row in plans.items()],
                 part=f"cell={name}")
    if measured_here:
        writer.write("profiles", _profile_rows(card, columns), part=f"cell={name}")

    executable = {m: (row["policy"] if row["policy"] is not None else "functional")
                  for m, row in plans.items() if row["feasible"]}
    # The checks compare every code path of every policy; their batch may be reduced on a
    # profile (cost_runtime.semantic_batch) because correctness does not depend on it and FP64
    # checks at full batch would cost a CPU cohort more than its timed steps.
    semantic_batch = cost_runtime.get("semantic_batch")
    checked = dataclasses.replace(shape, batch=min(shape.batch, int(semantic_batch))) if semantic_batch else shape
    note["semantic_batch"] = checked.batch
    checks = semantic_checks(checked, executable, seed=spec.seed, device=device)
    writer.write("records", [{"backend": "torch", "check_name": "semantic" if c.method in executable else "semantic_control",
                              "family": "cost_runtime", "seed": spec.seed, "workload": shape.workload,
                              "detail": json.dumps({"cell": name, **note}, sort_keys=True, default=str), **c.row()}
                             for c in checks], part=f"semantic-cell={name}")
    passed = {m for m in executable
              if all(c.outcome == "match" for c in checks if c.method == m) and
              sum(c.method == m for c in checks) == 2}

    # Methods run in an order drawn from the process seed: slow drift of a shared machine
    # (load, thermal state) then spreads over every method instead of biasing the last ones.
    order = random.Random(spec.seed).sample(methods, len(methods)) if params.get("shuffle", True) else methods
    for method in order:
        if method not in passed:
            continue  # infeasible (policies row says so) or failed its check (records row says so)
        times, peak = measure_method(shape, executable[method], seed=spec.seed, warmup=warmup, steps=steps,
                                     device=device)
        writer.write("timings", timing_rows(times, method=method, precision="fp32",
                                            peak_allocated_bytes=peak.allocated_bytes,
                                            peak_reserved_bytes=peak.reserved_bytes, peak_source=peak.source,
                                            device=device, seed=spec.seed, **columns),
                     part=f"cell={name}-method={method}")


def summary(out: str, cohort: str) -> str:
    """What the command prints after a run: per method, mean step time, measured and
    predicted peak and fits, then the prespecified ratios with their intervals."""
    from stateaware.analysis.timing import summary as timing_summary

    return timing_summary(out, cohort)
