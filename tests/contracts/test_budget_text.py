"""Budgets that cannot be misread, and the progress line's final count.

A budget typed as text without a unit is bytes, so ``--budget 50`` meant 50 bytes:
silently infeasible, exit 0. ``parse_budget_text``, the one reader of budget text on the
command lines and in configs, refuses a unitless number below 1 MiB in one line naming
the field and suggesting ``50%``; an explicit unit is always accepted, a Python int in
``stateaware.auto`` and ``parse_budget`` is unchanged, and ``150%`` is accepted with one
warning line (stateaware.planner.budget NOTE [ Unitless budgets ]).
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateaware import auto
from stateaware.planner import load_card, parse_budget
from stateaware.planner.budget import UNITLESS_FLOOR, UnitlessBudget, budget_on_card, parse_budget_text
from tests.cli_inprocess import PLAN, run_main, run_stateaware_in

ROOT = Path(__file__).resolve().parents[2]
CARD = ROOT / "conf" / "cards" / "large_sparse-523727961a1b.json"
HANDWRITTEN = Path(__file__).resolve().parents[1] / "data" / "cards" / "handwritten_large_sparse.json"
PROG = "python -m stateaware.plan"
MiB = 2**20


def _refusal(spelled: str, number: str) -> str:
    return (
        f"{spelled}: a budget without a unit is bytes, and {number} bytes is below 1 MiB; "
        f"did you mean {number}%? (units: B, KiB, MiB, GiB, ...; or P%)"
    )


# -- the rule ---------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["50", "0", "1048575", " 7 ", "0.5", "1048575.9"])
def test_a_unitless_budget_below_one_mib_is_refused_naming_the_field(text):
    with pytest.raises(UnitlessBudget) as info:
        parse_budget_text(text, field="--budget")
    number = text.strip()
    assert str(info.value) == _refusal(f"--budget {number}", number)
    with pytest.raises(UnitlessBudget) as info:  # a config key is spelled as its override
        parse_budget_text(text, field="cohort.params.budget")
    assert str(info.value) == _refusal(f"cohort.params.budget={number}", number)


@pytest.mark.parametrize("text", ["1048576", "47244640256", "1048576.5"])
def test_a_unitless_budget_of_at_least_one_mib_is_bytes(text, capsys):
    assert parse_budget_text(text, field="--budget") == int(float(text))
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("text", "expected"), [("512KiB", 512 * 1024), ("100B", 100), ("0B", 0), ("1MiB", MiB), ("1.5GiB", 3 * 2**29)]
)
def test_an_explicit_unit_is_always_accepted(text, expected, capsys):
    assert parse_budget_text(text, field="--budget") == expected
    assert capsys.readouterr().err == ""


def test_a_relative_budget_up_to_100_percent_is_silent(capsys):
    assert parse_budget_text("50%", field="--budget") == Fraction(1, 2)
    assert parse_budget_text("100%", field="--budget") == 1
    assert parse_budget_text("0%", field="--budget") == 0
    assert capsys.readouterr().err == ""


def test_150_percent_is_accepted_with_exactly_one_warning_line(capsys):
    assert parse_budget_text("150%", field="--budget") == Fraction(3, 2)
    err = capsys.readouterr().err
    assert err == "warning: --budget 150% is above all-eager (100%), so every policy fits\n"


@pytest.mark.parametrize("text", ["abc", "-3GiB", "44GB", "-5%", ""])
def test_malformed_text_is_a_plain_value_error(text):
    with pytest.raises(ValueError, match="cannot read budget") as info:
        parse_budget_text(text, field="--budget")
    assert not isinstance(info.value, UnitlessBudget)
    assert "47244640256" in str(info.value)  # the integer example is one the rule accepts


@settings(max_examples=300, derandomize=True, database=None)
@given(st.integers(min_value=0, max_value=UNITLESS_FLOOR - 1))
def test_every_unitless_integer_below_one_mib_is_refused_and_its_percent_accepted(n):
    with pytest.raises(UnitlessBudget, match=rf"^--budget {n}: .* did you mean {n}%\?"):
        parse_budget_text(str(n), field="--budget")
    err = io.StringIO()
    with redirect_stderr(err):
        assert parse_budget_text(f"{n}%", field="--budget") == Fraction(n, 100)
    # up to 100% silent; above it, accepted with one warning line
    assert err.getvalue().count("\n") == (0 if n <= 100 else 1)


# -- Python ints and the API are unchanged -------------------------------------------------


def test_python_ints_are_bytes_whatever_their_size():
    card = load_card(HANDWRITTEN)
    assert auto.plan(card, 1234).budget_bytes == 1234
    assert not auto.plan(card, 1234).feasible
    assert budget_on_card(50, card) == 50
    assert parse_budget(50) == 50 and parse_budget(0) == 0


# -- the command lines --------------------------------------------------------------------


def test_plan_refuses_a_unitless_budget_in_one_line_exit_2():
    outcome = run_main(PLAN, [str(CARD), "--budget", "50"], prog=PROG)
    assert outcome.status == 2 and not outcome.traceback and outcome.stdout == ""
    assert outcome.error_lines == [f"{PROG}: error: {_refusal('--budget 50', '50')}; see {PROG} --help"]


def test_plan_at_150_percent_plans_everything_eager_with_one_warning():
    outcome = run_main(PLAN, [str(CARD), "--budget", "150%", "--json"], prog=PROG)
    assert outcome.status == 0, outcome
    assert outcome.error_lines == ["warning: --budget 150% is above all-eager (100%), so every policy fits"]
    assert '"feasible": true' in outcome.stdout and '"whole"' not in outcome.stdout


@pytest.mark.parametrize("budget", ["512KiB", "100B", "1048576", "50%"])
def test_plan_accepts_units_big_byte_counts_and_percentages_silently(budget):
    outcome = run_main(PLAN, [str(CARD), "--budget", budget, "--json"], prog=PROG)
    assert outcome.status == 0 and outcome.stderr == "", outcome


def _launch(tmp_path: Path, *overrides: str):
    """``python -m stateaware cohort=demo out=… dry_run=true *overrides`` in-process, from tmp_path/cwd."""
    return run_stateaware_in(tmp_path, [*overrides, "dry_run=true"])


@pytest.mark.parametrize(("override", "number"), [("50", "50"), ("'50'", "50"), ("0.5", "0.5")])
def test_a_config_budget_without_a_unit_is_refused_naming_the_key(tmp_path, override, number):
    outcome = _launch(tmp_path, f"+cohort.params.budget={override}")
    assert outcome.status == 2
    assert outcome.error_lines == [f"error: invalid {_refusal(f'cohort.params.budget={number}', number)}"]


@pytest.mark.parametrize("value", ["50%", "2MiB", "512KiB", 2 * MiB, "150%"])
def test_config_budgets_with_a_unit_or_percent_pass_the_budget_check(value, capsys):
    from stateaware.run_spec import _budgets

    _budgets({"cohort": {"params": {"budget": value}}, "hardware": {"params": {"selection_budget": value}}})
    warnings = capsys.readouterr().err.splitlines()
    assert warnings == (
        [
            "warning: cohort.params.budget=150% is above all-eager (100%), so every policy fits",
            "warning: hardware.params.selection_budget=150% is above all-eager (100%), so every policy fits",
        ]
        if value == "150%"
        else []
    )


def test_keys_that_name_their_unit_keep_their_numbers(capsys):
    from stateaware.run_spec import _budgets

    # budget_gib: 44 is GiB and budget_bytes: 50 is bytes by the key's own name
    _budgets({"cohort": {"params": {"budget_gib": 44, "budget_bytes": 50}}})
    assert capsys.readouterr().err == ""


# -- the progress line ---------------------------------------------------------------------


class _Job:
    def __init__(self, index: int) -> None:
        self.index = index

    def done(self) -> bool:
        return True


class _Executor:
    def submit(self, fn, spec):
        return _Job(spec.process_index)


class _Spec:
    def __init__(self, index: int) -> None:
        self.process_index = index
        self.out = "unused"


def _ended(job, spec):
    from stateaware.launch.worker import ProcessResult

    return ProcessResult(process_index=spec.process_index, status="completed", attempt=1, pid=1)


@pytest.mark.parametrize(("inline", "limit"), [(False, 2), (False, 6), (True, 1)])
def test_the_progress_lines_last_count_is_every_finished_process(monkeypatch, inline, limit):
    from tqdm import tqdm

    from stateaware.launch import launcher

    monkeypatch.setattr(launcher, "collect", _ended)
    stream = io.StringIO()
    bar = tqdm(total=6, desc="demo", unit="proc", file=stream, mininterval=0, ncols=200)
    summary = launcher.Summary("r", "demo")
    specs = [_Spec(i) for i in range(6)]
    launcher._run_throttled(_Executor(), specs, summary, bar, limit=limit, inline=inline, poll_s=0)  # type: ignore[arg-type]
    bar.close()
    frames = [f for f in stream.getvalue().replace("\n", "\r").split("\r") if f.strip()]
    assert "6/6" in frames[-1] and "done=6 failed=0 running=0" in frames[-1], frames[-1]
    # every frame that shows a count shows the processes counted so far
    for frame in frames:
        if "done=" in frame:
            shown = int(frame.split("/6")[0].split()[-1].split("|")[-1])
            assert f"done={shown} " in frame, frame
