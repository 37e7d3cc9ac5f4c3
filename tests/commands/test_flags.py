"""The command lines' flags, read from their parsers: one spelling and one name per flag
everywhere it applies, and help in plain words (no reStructuredText from docstrings)."""

from __future__ import annotations

import argparse
import re

import pytest

from stateaware.commands.analysis import create_parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in create_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _with(flag: str) -> list[str]:
    return sorted(name for name, sub in _commands().items() if any(flag in a.option_strings for a in sub._actions))


def test_a_flag_has_one_spelling_and_one_name_in_every_command():
    seen: dict[str, set[tuple[object, str]]] = {}
    for sub in _commands().values():
        for action in sub._actions:
            for option in action.option_strings:
                seen.setdefault(option, set()).add((action.metavar, action.dest))
    assert seen["--results"] == {("DIR", "results")}
    assert seen["--run-id"] == {("RUN_ID", "run_id")}
    assert seen["--cohort"] == {("COHORT", "cohort")}
    assert {dest for _, dest in seen["--format"]} == {"format"}


def test_the_shared_flags_are_on_every_command_they_apply_to():
    every = sorted(_commands())
    assert every == ["check", "compact", "compare", "report", "runs", "sql", "status", "views"]
    assert _with("--results") == every
    # compare names its two runs as arguments; views describes the views, not runs.
    assert _with("--run-id") == _with("--cohort") == ["check", "compact", "report", "runs", "sql", "status"]
    assert _with("--format") == ["check", "compare", "runs", "sql", "status"]


#: reStructuredText a docstring might carry into --help: double backquotes and Sphinx roles.
MARKUP = re.compile(r"``|:(?:class|func|meth|mod|data|attr|exc|obj):`")


def _help_of(main, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 0
    return capsys.readouterr().out


def _tools():
    from stateaware.commands import cifar_archive, encoder_card, freeze_cards, plan, sections

    return {
        "plan": plan.main,
        "timing": sections.timing,
        "application": sections.application,
        "cifar_archive": cifar_archive.main,
        "encoder_card": encoder_card.main,
        "freeze_cards": freeze_cards.main,
    }


@pytest.mark.parametrize("command", [None, *sorted(_commands())])
def test_analysis_help_is_plain_words(capsys, command):
    text = _help_of(create_parser().parse_args, [*([command] if command else []), "--help"], capsys)
    assert text.startswith("usage: ") and not MARKUP.findall(text), text


@pytest.mark.parametrize("tool", sorted(_tools()))
def test_every_other_tool_s_help_is_plain_words(capsys, tool):
    text = _help_of(_tools()[tool], ["--help"], capsys)
    assert text.startswith("usage: ") and not MARKUP.findall(text), text


@pytest.mark.parametrize("command", ["check", "runs", "status", "compact", "views", "report"])
def test_a_results_folder_that_is_not_there_is_refused_by_every_command(tmp_path, capsys, command):
    from stateaware.analysis.__main__ import main

    missing = tmp_path / "nowhere"
    with pytest.raises(SystemExit) as exited:
        main([command, "--results", str(missing)])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(f"error: --results {missing}: no such directory; ")


def test_the_plan_tool_takes_format_json_and_keeps_json_as_its_old_spelling(capsys):
    from pathlib import Path

    from stateaware.commands.plan import main

    card = str(Path(__file__).resolve().parents[1] / "data" / "cards" / "handwritten_large_sparse.json")
    outputs = []
    for flags in (["--format", "json"], ["--json"], ["--format", "text"], []):
        assert main([card, "--budget", "32GiB", *flags]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[0].startswith("{")
    assert outputs[2] == outputs[3] and outputs[2] != outputs[0]


EDGE_NUMBERS = ("nan", "inf", "-inf", "1e308", "-1", "0", "99999999999999999999999", "true", "")


def _numeric_options() -> list[tuple[str, argparse.Action]]:
    """Every option of every analysis command whose value is a number: its type reads ``"1"``
    or ``"0.05"`` as a number (paths, names, sizes and choices are not)."""
    found = []
    for name, sub in sorted(_commands().items()):
        for action in sub._actions:
            if not action.option_strings or action.type is None or action.choices:
                continue
            for probe in ("1", "0.05"):
                try:
                    value = action.type(probe)
                except (argparse.ArgumentTypeError, ValueError):
                    continue
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    found.append((name, action))
                break
    return found


def test_every_numeric_option_is_found():
    named = sorted((name, action.option_strings[0]) for name, action in _numeric_options())
    assert ("sql", "--timeout") in named and ("sql", "--max-rows") in named
    assert ("compare", "--alpha") in named and ("compact", "--jobs") in named and ("check", "--max-cv") in named


@pytest.mark.parametrize("text", EDGE_NUMBERS)
def test_every_numeric_option_refuses_what_is_out_of_range_naming_the_allowed_values(text):
    """A value a numeric option cannot hold ends in argparse's one line naming the allowed
    values; a value it accepts is a finite number in that range (never nan, inf, 1e308)."""
    for name, action in _numeric_options():
        try:
            value = action.type(text)
        except (argparse.ArgumentTypeError, ValueError) as refused:
            assert str(refused).strip() and "\n" not in str(refused), (name, action.option_strings, text)
            continue
        assert isinstance(value, (int, float)) and abs(value) <= 10**7, (name, action.option_strings, text, value)
        assert value == value and text not in ("nan", "inf", "-inf", "1e308", "99999999999999999999999", "true", "")
