"""python -m stateaware.plan on hostile cards: one line, exit 2, quickly (NOTE [ Card limits ]).

Each case runs the command line in-process (``tests/cli_inprocess.py``: ``sys.argv``
patched, ``SystemExit`` caught) except the FIFO, which runs as a fresh process under a
timeout so that a blocking open would fail the test instead of hanging it. Every refusal
must be exactly one stderr line naming the file and the problem, with no traceback, within
``WALL_S`` seconds (generous: CI machines are busy; the checks themselves take well under
one second).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stateaware.planner import profile_card
from stateaware.planner.profile_card import MAX_CARD_BYTES, MAX_DEPTH, MAX_INT_DIGITS, MAX_SEGMENTS
from tests.cli_inprocess import PLAN, Outcome, run_main

HANDWRITTEN = Path(__file__).resolve().parents[1] / "data" / "cards" / "handwritten_large_sparse.json"
PROG = "python -m stateaware.plan"
WALL_S = 5.0
DEEP = 100_000


def _card() -> dict:
    return json.loads(HANDWRITTEN.read_text())


def _plan(path: Path | str, *extra: str) -> tuple[Outcome, float]:
    start = time.perf_counter()
    outcome = run_main(PLAN, [str(path), "--budget", "44GiB", *extra], prog=PROG)
    return outcome, time.perf_counter() - start


def _refused(path: Path | str, *words: str) -> str:
    """Plan ``path``; assert the documented refusal and return its one line."""
    outcome, took = _plan(path)
    assert outcome.status == 2, outcome
    assert not outcome.traceback, outcome.stderr
    assert len(outcome.error_lines) == 1, outcome.stderr
    line = outcome.error_lines[0]
    assert str(path) in line, line
    for word in words:
        assert word in line, line
    assert took < WALL_S, f"took {took:.1f} s: {line}"
    return line


def _write(tmp_path: Path, text: str | bytes, name: str = "card.json") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _with_field(text: str, where: str) -> str:
    """A valid card whose ``where`` field is the raw JSON ``text``."""
    marker = "123456789123456789"
    doc = _card()
    if where == "provenance":
        doc["provenance"]["x"] = int(marker)
    elif where == "ms":
        doc["segments"][2]["eager"]["ms"] = int(marker)
    elif where == "persistent_bytes":
        doc["persistent_bytes"] = int(marker)
    elif where == "retained_bytes":
        doc["segments"][5]["whole"]["retained_bytes"] = int(marker)
    else:
        raise AssertionError(where)
    return json.dumps(doc, indent=1).replace(marker, text, 1)


# --- nesting


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("[" * DEEP + "]" * DEEP, DEEP),
        ('{"a":' * DEEP + "1" + "}" * DEEP, DEEP),
        ('[{"a":' * (DEEP // 2) + "1" + "}]" * (DEEP // 2), DEEP),
        ("[" * DEEP, DEEP),  # unterminated as well
        ('{"segments":' + "[" * DEEP + "]" * DEEP + "}", DEEP + 1),
    ],
    ids=["lists", "dicts", "mixed", "unterminated", "top-level field"],
)
def test_deep_nesting_is_refused_before_parsing(tmp_path, text, depth):
    _refused(_write(tmp_path, text), f"nested {depth:,} deep", f"at most {MAX_DEPTH}")


@pytest.mark.parametrize("where", ["provenance", "ms", "persistent_bytes", "retained_bytes"])
def test_deep_nesting_inside_a_valid_card_field_is_refused(tmp_path, where):
    _refused(_write(tmp_path, _with_field("[" * DEEP + "]" * DEEP, where)), "nested", f"at most {MAX_DEPTH}")


def test_nesting_at_the_limit_loads_and_brackets_in_strings_do_not_count(tmp_path):
    # The card nests 2 deep at provenance's values (top object, provenance object).
    inner = MAX_DEPTH - 2
    text = _with_field("[" * inner + "]" * inner, "provenance")
    outcome, _ = _plan(_write(tmp_path, text, "at_limit.json"))
    assert outcome.status == 0, outcome
    doc = _card()
    doc["provenance"]["note"] = "[[[{{{" * DEEP + '\\"[' * 10
    outcome, _ = _plan(_write(tmp_path, json.dumps(doc), "strings.json"))
    assert outcome.status == 0, outcome
    _refused(
        _write(tmp_path, _with_field("[" * (inner + 1) + "]" * (inner + 1), "provenance"), "over.json"),
        f"nested {MAX_DEPTH + 1} deep",
    )


@settings(
    max_examples=25,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    opens=st.lists(st.sampled_from(["[", '{"k":']), min_size=MAX_DEPTH + 1, max_size=3 * MAX_DEPTH),
    where=st.sampled_from(["provenance", "ms", "persistent_bytes", "retained_bytes"]),
)
def test_any_shape_nested_past_the_limit_is_refused(tmp_path, opens, where):
    closes = "".join("]" if o == "[" else "}" for o in reversed(opens))
    _refused(_write(tmp_path, _with_field("".join(opens) + "0" + closes, where)), "nested", f"at most {MAX_DEPTH}")


# --- numbers


@pytest.mark.parametrize("where", ["provenance", "ms", "persistent_bytes", "retained_bytes"])
@pytest.mark.parametrize("literal", ["9" * 5000, "-" + "1" * 5000, "1" * (MAX_INT_DIGITS + 1)])
def test_huge_integers_are_refused_before_int(tmp_path, where, literal):
    digits = len(literal.lstrip("-"))
    _refused(_write(tmp_path, _with_field(literal, where)), f"{digits:,} digits", f"at most {MAX_INT_DIGITS}")


def test_an_integer_of_the_largest_length_loads(tmp_path):
    outcome, _ = _plan(_write(tmp_path, _with_field("1" * MAX_INT_DIGITS, "provenance")))
    assert outcome.status == 0, outcome


def test_bytes_beyond_int64_are_refused_naming_the_rescale(tmp_path):
    path = _write(tmp_path, _with_field("9" * 19, "persistent_bytes"))
    _refused(path, "cannot plan card", "int64")
    # A relative budget reads the card's totals too: the card is named, not the flag.
    outcome, _ = _plan(path, "--budget", "50%")
    assert outcome.status == 2 and "int64" in outcome.stderr and "argument --budget" not in outcome.stderr


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
@pytest.mark.parametrize("where", ["provenance", "ms", "retained_bytes"])
def test_nan_and_infinity_are_refused(tmp_path, constant, where):
    _refused(_write(tmp_path, _with_field(constant, where)), constant, "not a JSON number")


@pytest.mark.parametrize("where", ["provenance", "ms"])
def test_a_number_beyond_a_double_is_refused(tmp_path, where):
    _refused(_write(tmp_path, _with_field("1e400", where)), "1e400", "64-bit float")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("-1", ("retained_bytes", "non-negative")),
        ("1.5", ("retained_bytes", "whole number")),
        ('"12"', ("retained_bytes", "integer")),
        ("true", ("retained_bytes", "integer")),
    ],
)
def test_byte_counts_must_be_non_negative_integers(tmp_path, value, words):
    _refused(_write(tmp_path, _with_field(value, "retained_bytes")), "segments[5].whole", *words)


# --- files that are not cards


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "card.fifo"
    os.mkfifo(fifo)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "stateaware.plan", str(fifo), "--budget", "1GiB"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.perf_counter() - start
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert str(fifo) in lines[0] and "FIFO" in lines[0] and "Traceback" not in done.stderr
    assert took < 2 * WALL_S, took  # a fresh interpreter (~0.5 s here), then no wait at all


def test_a_directory_is_refused(tmp_path):
    _refused(tmp_path, "is a directory", "not a regular file")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")
def test_a_device_is_refused_without_reading_it():
    _refused("/dev/zero", "character device")


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as handle:  # sparse: nothing written, nothing read
        handle.truncate(5 << 30)
    _refused(big, f"{5 << 30:,} bytes", f"{MAX_CARD_BYTES:,}", "MAX_CARD_BYTES")


def test_a_missing_file_is_refused(tmp_path):
    _refused(tmp_path / "nope.json", "No such file")


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"\xff\xfe{}", ("not UTF-8",)),
        (b'{"persistent_bytes": 1, "segm', ("not valid JSON",)),
        (b"", ("not valid JSON", "empty")),
        (b" \n\t ", ("not valid JSON", "empty")),
        (b"[1, 2]", ("JSON object", "list")),
        (b'"card"', ("JSON object", "str")),
        (b"42", ("JSON object", "int")),
        (b"null", ("JSON object", "NoneType")),
        (b'{"persistent_bytes": 1, "segments": {}}', ("segments must be a non-empty list",)),
        (b'{"persistent_bytes": 1, "segments": [], "segments": [{}]}', ("duplicate key 'segments'",)),
    ],
    ids=[
        "not utf-8",
        "truncated",
        "empty",
        "blank",
        "list",
        "string",
        "number",
        "null",
        "segments object",
        "duplicate key",
    ],
)
def test_text_that_is_not_a_card_is_refused(tmp_path, content, words):
    _refused(_write(tmp_path, content), *words)


def test_a_duplicate_field_inside_an_option_is_refused(tmp_path):
    text = _with_field('1, "ms": 2', "ms")
    _refused(_write(tmp_path, text), "duplicate key 'ms'")


def test_thousands_of_unknown_keys_still_make_one_short_line(tmp_path):
    doc = {str(i): 1 for i in range(50_000)}
    line = _refused(_write(tmp_path, json.dumps(doc)), "unknown key(s)", "and 49,995 more")
    assert len(line) < 400


def test_an_unpaired_surrogate_in_provenance_is_refused(tmp_path):
    _refused(_write(tmp_path, _with_field('"\\ud800"', "provenance")), "surrogate")


@pytest.mark.parametrize("scale", ['"abc"', "[1]", "true", "0", "5e-324", "-0.5"])
def test_any_recorded_scale_prints_without_a_traceback(tmp_path, scale):
    text = _with_field(scale, "provenance").replace('"x":', '"scale":', 1)
    outcome, _ = _plan(_write(tmp_path, text))
    assert outcome.status == 0 and not outcome.traceback, outcome
    assert "hardware" in outcome.stdout


# --- segment count


def _segments(n: int) -> str:
    segment = {"eager": {"retained_bytes": 1, "temp_bytes": 1, "ms": 1.0}}
    return json.dumps({"persistent_bytes": 0, "segments": [segment] * n})


def test_one_segment_past_the_limit_is_refused_naming_it(tmp_path):
    _refused(
        _write(tmp_path, _segments(MAX_SEGMENTS + 1)),
        f"{MAX_SEGMENTS + 1:,} segments",
        f"at most {MAX_SEGMENTS:,}",
        "MAX_SEGMENTS",
    )


def test_a_card_at_the_limit_plans(tmp_path):
    outcome, took = _plan(_write(tmp_path, _segments(MAX_SEGMENTS)), "--json")
    assert outcome.status == 0, outcome
    assert json.loads(outcome.stdout)["policy"] == ["eager"] * MAX_SEGMENTS
    assert took < WALL_S


def test_a_hundred_thousand_segments_are_refused_by_size_naming_both_limits(tmp_path):
    line = _refused(_write(tmp_path, _segments(DEEP)), "MAX_CARD_BYTES", f"{MAX_SEGMENTS} segments")
    assert "bytes" in line


def test_the_segment_limit_is_read_when_loading(tmp_path, monkeypatch):
    monkeypatch.setattr(profile_card, "MAX_SEGMENTS", 3)
    _refused(_write(tmp_path, _segments(4)), "4 segments", "at most 3")


def test_help_states_the_limits():
    outcome = run_main(PLAN, ["--help"], prog=PROG)
    assert outcome.status == 0
    text = " ".join(outcome.stdout.split())
    assert f"{MAX_SEGMENTS} segments" in text and f"{MAX_CARD_BYTES >> 20} MiB" in text and " s " in text


def _huge_value_cards() -> list[str]:
    wide = ["x" * 1000] * 500  # half a megabyte of repr
    doc = _card()
    doc["provenance"] = wide
    return [json.dumps(doc), _with_field(json.dumps(wide), "ms"), _with_field(json.dumps(wide), "retained_bytes")]


@pytest.mark.parametrize("index", range(3), ids=["provenance", "ms", "retained_bytes"])
def test_a_huge_wrong_value_is_shown_cut_short(tmp_path, index):
    line = _refused(_write(tmp_path, _huge_value_cards()[index]), "...")
    assert len(line) < 400, len(line)


def test_load_card_raises_card_error_naming_the_file(tmp_path):
    from stateaware.planner import CardError, load_card

    path = _write(tmp_path, "[" * DEEP)
    with pytest.raises(CardError, match=re.escape(f"{path}: brackets nested 100,000 deep")):
        load_card(path)
