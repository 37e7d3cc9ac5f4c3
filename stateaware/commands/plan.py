"""Plan a profile card from the command line.

    python -m stateaware.plan CARD --budget 44GiB --planner joint
    python -m stateaware.plan CARD --budget 50% --json
    python -m stateaware.plan CARD --budget 44GiB --plot frontier.png

Prints the card's hardware, scale and segment count, the policy per segment and the
predicted totals; ``--json`` (or ``--format json``) prints only ``{"feasible", "policy", "predicted_peak_bytes",
"predicted_ms", "frontier_size", "truncated", "budget_bytes", "planner",
"min_peak_bytes", "card_digest"}``; ``--plot`` writes the frontier (predicted peak
against predicted time) with the budget line, and the text then gives the number of
points it plotted. ``--budget P%`` places the budget P percent of the way from the least
achievable peak to the all-eager peak (``stateaware.planner.budget``); above 100% it is
accepted with one warning line (every policy fits). A unitless ``--budget`` below 1 MiB
(``--budget 50``) is refused, suggesting ``50%`` (NOTE [ Unitless budgets ]). Exit status 0
whether or not the plan is feasible (infeasible is an outcome, not an error); 2 for a bad
argument or a malformed card (one line naming it); 130 after Ctrl-C.

The largest card accepted has ``MAX_SEGMENTS`` = 256 segments; a card with more (100,000,
say) is refused in one line naming its count and the limit, before any planning (one of
100,000 segments cannot fit the 1 MiB size limit, and that refusal names both limits).
Measured at 256 segments on this project's 2-core machine, shared (load ~5), on random
cards (``stateaware.planner.synthetic``) at budgets 2-75 %: the worst, four-option cards at
low budgets, took 4.4 s of CPU and 9 s wall to plan (11 s for the whole command; median
~2 s); three-option cards at most 1.6 s, the shipped cards (64 segments at most) under
0.1 s. ``--plot`` plans a second time for the full frontier: up to 19 s wall in all on
the worst card. The time is measured, not bounded: the untruncated frontier, not the
segment count, sets it (384 segments took up to 52 s, 512 over 150 s); ``--frontier-cap``
bounds the points kept per segment. The file is read within the card limits of
``stateaware.planner.profile_card`` (NOTE [ Card limits ]): a regular file (a FIFO or
device is refused without blocking) of at most 1 MiB, nested at most 32 deep, integers of
at most 40 digits, no NaN or Infinity, no duplicate key; each is refused in one line
within a second.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path

from stateaware.commands.arguments import version_argument
from stateaware.exits import OneLineParser, fail, int_at_least, run_main
from stateaware.planner import (
    OPTIONS,
    PLANNERS,
    CardError,
    Plan,
    ProfileCard,
    format_bytes,
    load_card,
    min_peak_bytes,
    plan,
)
from stateaware.planner.budget import UnitlessBudget, budget_on_card, parse_budget_text, relative_position
from stateaware.planner.profile_card import MAX_CARD_BYTES, MAX_SEGMENTS
from stateaware.units import UNITS

__all__ = ["main", "plot_frontier", "frontier_figure", "script"]

#: Frontier cap for the plot's own planning run when --frontier-cap is not given: every
#: fitting policy's frontier can grow to millions of points on large irregular cards,
#: and a plot needs far fewer; a plot that was thinned says so in its title.
PLOT_FRONTIER_CAP = 4096

#: Image formats ``--plot`` writes (matplotlib's, named by the file's suffix); checked
#: before planning so a typo costs nothing.
PLOT_FORMATS = ("png", "pdf", "svg", "jpg", "jpeg", "webp", "tif", "tiff", "eps", "ps")

#: What ``--plot`` needs beyond the core install (torch, numpy): matplotlib, from the
#: analysis extra.
PLOT_INSTALL = "pip install 'stateaware[analysis]'"


def _pyplot():
    """matplotlib's ``pyplot`` on the file-only Agg backend.

    Raises ``ImportError`` with one line naming the install when matplotlib is absent: the
    core install leaves it out, so planning from the command line does not pay for it.
    """
    try:
        # lazy: matplotlib is no part of the core install; only --plot needs it (the ImportError below)
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # lazy: as matplotlib above
    except ImportError as error:
        raise ImportError(f"--plot needs matplotlib, which the core install leaves out: {PLOT_INSTALL}") from error
    return plt


def _plot_path(text: str) -> str:
    path = Path(text)
    if path.suffix.lstrip(".").lower() not in PLOT_FORMATS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: name the image format by its suffix, one of {', '.join('.' + f for f in PLOT_FORMATS)}"
        )
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; name the image file to write")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: no directory {str(path.parent)!r} to write it in")
    return text


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m stateaware.plan",
        description="Choose a per-segment policy (eager | whole | region | offload) for a profile card under a "
        "memory budget.",
    )
    parser.add_argument(
        "card",
        help=f"profile card JSON file: a regular file of at most {MAX_CARD_BYTES >> 20} MiB and {MAX_SEGMENTS} "
        "segments (more are refused; at 256 segments planning took at most 4.4 s of CPU, 9 s wall, on 2 shared "
        "cores)",
    )
    parser.add_argument(
        "--budget",
        required=True,
        help="logical memory budget: a number with B, KiB, MiB, GiB or TiB (44GiB, 1.5GiB), bytes (47244640256; "
        "a unitless number below 1 MiB is refused: did you mean 50%%?), or P%% of the way from the least achievable "
        "peak to the all-eager peak (50%%; above 100%% every policy fits)",
    )
    parser.add_argument("--planner", default="joint", choices=list(PLANNERS), help="default: %(default)s")
    parser.add_argument(
        "--frontier-cap",
        type=int_at_least(2),
        default=None,
        help="keep at most this many frontier points per segment (default: untruncated, optimal)",
    )
    version_argument(parser)
    parser.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: the plan per segment and its totals (default); json: the plan as one JSON object",
    )
    parser.add_argument("--json", dest="format", action="store_const", const="json", help="the same as --format json")
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        type=_plot_path,
        help=f"write the predicted peak/time frontier of the policies that fit, with the budget line "
        f"(at most --frontier-cap or {PLOT_FRONTIER_CAP} points per segment)",
    )
    return parser


def _scale_text(scale: object) -> str:
    """``1/N`` for a scale that is the reciprocal of an integer, else the value as recorded."""
    if scale is None:
        return "unrecorded"
    # Provenance is free-form: only a finite positive number is read as a fraction.
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < 1:
        return f"{scale}"
    inverse = 1 / float(scale)
    return f"1/{round(inverse)}" if math.isfinite(inverse) and inverse.is_integer() else f"{scale}"


def _hardware(card: ProfileCard) -> str:
    prov = card.provenance
    hardware = prov.get("hardware") or prov.get("device_name") or prov.get("device") or "unrecorded"
    return f"{hardware}, scale {_scale_text(prov.get('scale'))} of the paper's bytes"


def _report(card: ProfileCard, result: Plan, budget_text: str, curve: Plan) -> str:
    relative = relative_position(budget_text)
    where = "" if relative is None else f", {budget_text} of the way from the least achievable peak to all-eager"
    lines = [
        f"card      {result.card_digest}",
        f"hardware  {_hardware(card)}",
        f"segments  {card.n_segments}, persistent {format_bytes(card.persistent_bytes)}",
        f"planner   {result.planner}",
        f"budget    {format_bytes(result.budget_bytes)} ({result.budget_bytes} bytes{where})",
    ]
    least = (
        "none (a segment lacks every option of this planner)"
        if result.min_peak_bytes is None
        else (f"{format_bytes(result.min_peak_bytes)} ({result.min_peak_bytes} bytes)")
    )
    if not result.feasible:
        lines += ["feasible  no: no policy of this planner fits the budget", f"min peak  {least}"]
        return "\n".join(lines)
    lines.append("")
    for index, option in enumerate(result.policy):
        lines.append(f"segment {index:4d}  {option}")
    counts = ", ".join(f"{result.policy.count(o)} {o}" for o in OPTIONS if o in result.policy)
    fits = (
        "yes"
        if result.fits_budget
        else (
            f"NO: over by {format_bytes(result.predicted_peak_bytes - result.budget_bytes)} "
            "(this planner omitted state costs; the peak is re-costed with the true ones)"
        )
    )
    lines += [
        "",
        f"policy    {counts}",
        f"peak      {format_bytes(result.predicted_peak_bytes)} ({result.predicted_peak_bytes} bytes), predicted",
        f"time      {result.predicted_ms:.3f} ms per step, predicted",
        f"fits      {fits}",
        f"min peak  {least}",
        f"frontier  {curve.frontier.shape[0]} point{'' if curve.frontier.shape[0] == 1 else 's'} on the peak/time "
        "trade-off"
        + (" (as plotted)" if curve is not result else "")
        + ", "
        + ("TRUNCATED: optimality not claimed" if curve.truncated else "untruncated"),
    ]
    return "\n".join(lines)


def plot_frontier(result: Plan, path: str) -> None:
    """Write ``frontier_figure(result)`` to ``path``. Raises ``ImportError`` naming the
    install where matplotlib is absent (the core leaves it out)."""
    plt = _pyplot()
    fig = frontier_figure(result)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def frontier_figure(result: Plan):  # -> matplotlib Figure (matplotlib is no core dependency)
    """``result.frontier`` (predicted peak vs time) with the budget as a vertical line.

    Peaks and the budget share one binary unit, chosen by the largest of them (the unit
    ``format_bytes`` would print it in), so the budget line sits where its label says.
    For a dynamic-program planner pass a plan made with ``full_frontier=True`` so every
    fitting policy's trade-off appears, not only the near-optimal ones.
    """
    plt = _pyplot()
    peaks = [result.budget_bytes, *result.frontier[:, 0].tolist()]
    if result.feasible:
        peaks.append(result.predicted_peak_bytes)
    unit = format_bytes(max(peaks)).split()[-1]  # "B", "KiB", ... "TiB"
    scale = float(UNITS[unit])
    fig, ax = plt.subplots(figsize=(6, 4))
    if result.frontier.shape[0]:
        ax.step(
            result.frontier[:, 0] / scale,
            result.frontier[:, 1],
            where="post",
            marker="o",
            ms=3,
            label="frontier (planner's cost view)",
        )
    if result.feasible:
        ax.plot([result.predicted_peak_bytes / scale], [result.predicted_ms], "r*", ms=12, label="chosen (true cost)")
    budget = result.budget_bytes / scale
    ax.axvline(budget, color="k", ls="--", label=f"budget {budget:.3f} {unit}")
    ax.set_xlabel(f"predicted peak ({unit})")
    ax.set_ylabel("predicted time (ms per step)")
    status = ("" if result.feasible else " — infeasible") + (" — frontier thinned (cap)" if result.truncated else "")
    ax.set_title(f"{result.planner}: card {result.card_digest[:12]}{status}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:  # before the card is read, so a misread budget costs nothing
        parse_budget_text(args.budget, field="--budget")
    except UnitlessBudget as error:
        parser.error(str(error))  # it names the flag itself
    except ValueError as error:
        parser.error(f"argument --budget: {error}")
    try:
        card = load_card(args.card)
    except CardError as error:
        parser.error(f"cannot load card: {error}")
    try:
        # The int64 headroom check, before a relative budget or the planner meets it.
        min_peak_bytes(card.persistent_bytes, card.segments)
    except ValueError as error:
        parser.error(f"cannot plan card {args.card}: {error}")
    try:
        budget = budget_on_card(args.budget, card)
    except ValueError as error:
        parser.error(f"argument --budget: {error}")
    if args.plot:
        try:  # before planning, so a missing matplotlib costs nothing
            _pyplot()
        except ImportError as error:
            fail(str(error))
    result = plan(card, budget, args.planner, args.frontier_cap)
    curve = result
    if args.plot:
        # The printed plan keeps its bounded search; the plot shows every fitting policy
        # (thinned to PLOT_FRONTIER_CAP per segment if there are more, and then titled so),
        # and the text reports the size of that plotted frontier.
        cap = args.frontier_cap or PLOT_FRONTIER_CAP
        curve = plan(card, budget, args.planner, cap, full_frontier=True)
        try:
            plot_frontier(curve, args.plot)
        except OSError as error:  # a read-only directory, a full disk
            parser.error(f"argument --plot: cannot write {args.plot!r} ({error.strerror or error})")
    print(result.to_json() if args.format == "json" else _report(card, result, args.budget, curve))
    if args.plot and args.format != "json":
        print(f"plot      {args.plot} ({curve.frontier.shape[0]} points)")
    return 0


def script() -> None:
    """Run the command line as a program: ``python -m stateaware.plan`` and the ``stateaware-plan``
    script; exits with its status."""
    run_main(main)


if __name__ == "__main__":
    script()
