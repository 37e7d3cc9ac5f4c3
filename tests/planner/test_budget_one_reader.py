"""One reader of budgets on every surface: the API, the planner's command line, the configs.

``auto.wrap(budget="50")`` meant 50 bytes and blamed the budget after profiling, while
``python -m stateaware.plan --budget 50`` asked "did you mean 50%?". Every surface now reads
a budget with ``stateaware.planner.budget.parse_budget_text``: for any spelling each gives
the bytes the others give, or the same error naming its own field (NOTE [ Unitless budgets ]).
"""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stderr
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stateaware import auto
from stateaware.auto.fit import fit
from stateaware.planner import load_card, parse_budget
from stateaware.planner.budget import UnitlessBudget, budget_on_card, parse_budget_text
from tests.cli_inprocess import PLAN, run_main

ROOT = Path(__file__).resolve().parents[2]
CARD = ROOT / "conf" / "cards" / "large_sparse-523727961a1b.json"
PROG = "python -m stateaware.plan"

#: Units the reader accepts, spellings it refuses (decimal, lower case, words) and ``%``.
SUFFIXES = ["", "", "B", "KiB", "MiB", "GiB", "TiB", "%", "GB", "MB", "kib", "gigs", "e3"]


@st.composite
def spellings(draw) -> str:
    whole = draw(st.integers(min_value=0, max_value=2**41))
    number = str(whole) if draw(st.booleans()) else f"{whole % 4096}.{draw(st.integers(0, 99))}"
    sign = draw(st.sampled_from(["", "", "", "-"]))
    space = draw(st.sampled_from(["", " "]))
    return f"{space}{sign}{number}{draw(st.sampled_from(['', ' ']))}{draw(st.sampled_from(SUFFIXES))}{space}"


def _read(value, field: str):
    """What the one reader makes of ``value`` for ``field``: ``("ok", value)`` or
    ``("error", exception type, message)``; its stderr as the second item."""
    err = io.StringIO()
    with redirect_stderr(err):
        try:
            outcome = ("ok", parse_budget_text(value, field=field))
        except ValueError as exc:
            outcome = ("error", type(exc), str(exc))
    return outcome, err.getvalue()


class _Reached(Exception):
    """Profiling was reached: the budget passed the check before it."""


def _wrap_outcome(monkeypatch, budget):
    def profile(*args, **kwargs):
        raise _Reached

    monkeypatch.setattr(auto, "profile", profile)
    try:
        auto.wrap(torch.nn.Sequential(torch.nn.Linear(2, 2)), (torch.randn(1, 2),), budget=budget)
    except _Reached:
        return "reached"
    except ValueError as exc:
        return ("error", type(exc), str(exc))
    raise AssertionError("wrap returned without profiling")


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(text=spellings())
def test_every_surface_reads_a_spelling_as_the_one_reader_does(text, monkeypatch):
    from stateaware.run_spec import ConfigError, _budgets

    card = load_card(CARD)
    api, api_err = _read(text, "budget")

    # stateaware.auto.plan: the same bytes (placed on the card), or the same error and warning
    err = io.StringIO()
    with redirect_stderr(err):
        try:
            planned = ("ok", auto.plan(card, text).budget_bytes)
        except ValueError as exc:
            planned = ("error", type(exc), str(exc))
    assert err.getvalue() == api_err
    if api[0] == "ok":
        assert planned == ("ok", budget_on_card(text, card))
    else:
        assert planned == api

    # stateaware.auto.wrap: refused before any profiling with the same error, else profiles
    assert _wrap_outcome(monkeypatch, text) == ("reached" if api[0] == "ok" else api)

    # the budget loop itself: the same error before anything is measured
    if api[0] == "error":
        measured: list[tuple[str, ...]] = []
        with pytest.raises(ValueError) as info:
            fit(card, text, "joint", lambda policy: measured.append(policy) or 0, lambda **doc: doc)
        assert (type(info.value), str(info.value)) == api[1:] and measured == []

    # the planner's command line: the same bytes, or one error line with the reader's words
    cli, cli_err = _read(text, "--budget")
    outcome = run_main(PLAN, [str(CARD), f"--budget={text}", "--json"], prog=PROG)  # = : "-1" is no flag
    if cli[0] == "ok":
        assert outcome.status == 0 and outcome.stderr == cli_err, outcome
        assert json.loads(outcome.stdout)["budget_bytes"] == planned[1]
    else:
        assert outcome.status == 2 and not outcome.traceback and outcome.stdout == ""
        assert len(outcome.error_lines) == 1 and cli[2] in outcome.error_lines[0]

    # a config's budget key: accepted with the same warning, or refused with the reader's words
    key = "cohort.params.budget"
    config, config_err = _read(text, key)
    err = io.StringIO()
    with redirect_stderr(err):
        try:
            _budgets({"cohort": {"params": {"budget": text}}})
            refused = None
        except ConfigError as exc:
            refused = str(exc)
    if config[0] == "ok":
        assert refused is None and err.getvalue() == config_err
    else:
        assert refused is not None and config[2] in refused
    # the surfaces agree with each other, not only with the reader: one verdict for all
    assert {api[0], cli[0], config[0]} == {api[0]}


def test_a_bare_number_string_is_refused_by_the_api_as_by_the_command_line(monkeypatch):
    card = load_card(CARD)
    expected = (
        "budget=50: a budget without a unit is bytes, and 50 bytes is below 1 MiB; "
        "did you mean 50%? (units: B, KiB, MiB, GiB, ...; or P%)"
    )
    for call in (
        lambda: auto.plan(card, "50"),
        lambda: parse_budget("50"),
        lambda: budget_on_card("50", card),
    ):
        with pytest.raises(UnitlessBudget) as info:
            call()
        assert str(info.value) == expected
    assert _wrap_outcome(monkeypatch, "50") == ("error", UnitlessBudget, expected)
    outcome = run_main(PLAN, [str(CARD), "--budget", "50"], prog=PROG)
    assert outcome.error_lines == [f"{PROG}: error: {expected.replace('budget=50', '--budget 50')}; see {PROG} --help"]


@pytest.mark.parametrize("value", [0.5, 2e9, True, None, Fraction(1, 2)])
def test_a_budget_neither_an_int_nor_text_is_refused_naming_the_keyword(monkeypatch, value):
    with pytest.raises(
        ValueError, match=rf"^budget={re.escape(repr(value))}: a budget is an int \(bytes\) or text; .*'50%'"
    ) as info:
        parse_budget_text(value)
    assert _wrap_outcome(monkeypatch, value) == ("error", ValueError, str(info.value))


def test_python_ints_stay_bytes_and_a_relative_budget_needs_a_card():
    assert parse_budget_text(50) == 50 and parse_budget(50) == 50
    with pytest.raises(ValueError, match=r"^budget '50%' is relative: it needs a card"):
        parse_budget("50%")
