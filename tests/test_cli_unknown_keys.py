"""A misspelled override names the keys that exist there, in one line with exit status 2,
instead of OmegaConf's "Key 'nn' is not in struct"; under ``cohort.params`` those are the
cohort kind's parameters."""

from __future__ import annotations

import dataclasses

import pytest
from stateaware.cohorts import load_kind

from stateaware.config import LauncherConfig
from tests.cli_inprocess import run_stateaware_in


def _params(kind: str) -> str:
    return ", ".join(load_kind(kind).PARAMS)


CASES = [
    (
        ["cohort=demo", "cohort.params.nn=3"],
        f"error: cohort 'demo': unknown parameter params.nn; valid parameters are: {_params('demo')}",
    ),
    (
        ["cohort=fair44", "cohort.params.shufle=true"],
        f"error: cohort 'fair44': unknown parameter params.shufle; valid parameters are: {_params('timing')}",
    ),
    (
        ["cohort=demo", "launcher.cpuss=2"],
        "error: unknown key launcher.cpuss; valid keys of launcher are: "
        + ", ".join(f.name for f in dataclasses.fields(LauncherConfig)),
    ),
]


@pytest.mark.parametrize(("overrides", "line"), CASES, ids=[c[0][1] for c in CASES])
def test_an_unknown_key_is_one_line_naming_the_valid_ones(tmp_path, overrides, line):
    done = run_stateaware_in(tmp_path, [*overrides, "dry_run=true"])
    assert (done.status, done.stdout, done.error_lines) == (2, "", [line])


def test_a_parameter_the_cohort_file_leaves_out_is_named_with_the_form_that_adds_it(tmp_path):
    done = run_stateaware_in(tmp_path, ["cohort=fair44", "cohort.params.shuffle=true", "dry_run=true"])
    assert (done.status, done.error_lines) == (
        2,
        [
            "error: cohort 'fair44': params.shuffle is a parameter of kind 'timing' that the cohort's file leaves "
            "out; add it with +cohort.params.shuffle=VALUE"
        ],
    )
    added = run_stateaware_in(tmp_path, ["cohort=fair44", "+cohort.params.shuffle=true", "dry_run=true"])
    assert added.status == 0, added.stderr
