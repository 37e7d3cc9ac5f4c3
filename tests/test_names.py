"""A name is never a path: every value that becomes a file or folder name is checked at the door.

Each class of the reliability issue's first items is injected in several spellings, through
the real command line (in-process), and each must end in exit 2 with one line naming the
field, no traceback, and nothing created or changed outside ``out`` — the parent folder of
``out`` and the working directory are listed before and after.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stateaware.names import MAX_NAME, NAME_RULE, InvalidName, PathOutsideError, check_inside, check_name
from tests.cli_inprocess import STATEAWARE, listing, run_main, run_stateaware_in

# -- the rule ---------------------------------------------------------------------------


@settings(max_examples=300, derandomize=True, database=None)
@given(st.text(min_size=0, max_size=130))
def test_a_name_is_one_path_component_or_refused_naming_the_field(value):
    try:
        assert check_name("cohort.params.method", value) == value
    except InvalidName as exc:
        assert re.fullmatch(NAME_RULE, value) is None
        assert str(exc).startswith("invalid cohort.params.method=") and "\n" not in str(exc)
        return
    assert re.fullmatch(NAME_RULE, value)
    assert Path(value).parts == (value,) and value not in (".", "..")
    assert not value.startswith(("-", ".")) and len(value.encode()) <= MAX_NAME
    # the longest folder a run makes stays far inside a file system's 255-byte limit
    assert len(f"run_id={value}".encode()) + len(".manifest.json.tmp-a-host-name-4194304") < 255


@pytest.mark.parametrize(
    "value",
    ["", ".", "..", "../x", "a/b", "a\\b", "-rf", ".hidden", "a b", "a\x00b", "a\nb", "x" * 101, "é", "a=b", "50%", 7],
)
def test_each_rule_is_said(value):
    with pytest.raises(InvalidName, match=r"^invalid run_id=.*: (empty|contains|starts with|\d+ characters|a int)"):
        check_name("run_id", value)


def test_a_path_through_a_link_out_of_out_is_refused(tmp_path):
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    (out / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert check_inside(out, out / "runs" / "x.json") == (out / "runs" / "x.json").resolve()
    for escaping in (out / "link" / "x.json", out / ".." / "x", tmp_path):
        with pytest.raises(PathOutsideError, match="outside the results directory"):
            check_inside(out, escaping)


# -- the command line -------------------------------------------------------------------


def _refused(tmp_path: Path, *overrides: str, names: tuple[str, ...], dry_run: bool = False):
    """Run ``python -m stateaware cohort=demo out=… *overrides`` in-process from ``tmp_path/cwd``;
    assert exit 2, one line naming ``names``, no traceback, nothing outside ``out`` touched."""
    outcome = run_stateaware_in(tmp_path, [*overrides, *(["dry_run=true"] if dry_run else [])])
    assert outcome.status == 2, outcome
    assert len(outcome.error_lines) == 1, outcome.stderr
    for name in names:
        assert name in outcome.error_lines[0], outcome.error_lines[0]
    return outcome.error_lines[0]


@pytest.mark.parametrize(
    "override",
    ["run_id=../../x", "run_id=a/b", "run_id=", "run_id=" + "y" * 300, "run_id=.", "run_id=..", "run_id='a b'"],
)
def test_a_run_id_that_is_not_a_name_is_refused(tmp_path, override):
    _refused(tmp_path, override, names=("run_id=",))


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("cohort.name=../x", "cohort.name="),
        ("cohort.name=", "cohort.name="),
        ("cohort.name=-x", "cohort.name="),
        ("cohort.kind=../demo", "cohort.kind="),
        ("cohort.kind=demo/x", "cohort.kind="),
        ("cohort.kind=a..b", "cohort.kind="),
        ("launcher.partition='a;b\tc'", "launcher.partition="),
    ],
)
def test_names_a_config_sets_are_checked_too(tmp_path, override, field):
    _refused(tmp_path, override, names=(field,))


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("+bogus=1", "bogus"),
        ("++bogus=1", "bogus"),
        ("+cohort.bogus=1", "cohort.bogus"),
        ("++launcher.nope=true", "launcher.nope"),
        ("+analysis.stability.maxcv=1", "analysis.stability.maxcv"),
        ("~out", "out"),
    ],
)
def test_an_unknown_or_removed_key_is_refused_however_spelled(tmp_path, override, key):
    line = _refused(tmp_path, override, names=(key,))
    assert line.startswith(("error: unknown key", "error: missing key"))


def test_free_form_mappings_take_new_keys_and_the_kind_checks_them(tmp_path):
    line = _refused(tmp_path, "+cohort.params.bogus=1", names=("params.bogus",))
    assert "unknown parameter" in line


@pytest.mark.parametrize(
    "override",
    [
        "hydra.run.dir=elsewhere",
        "hydra.sweep.dir=/tmp/anywhere",
        "+hydra.job.name=../x",
        "hydra.output_subdir=.hydra",
        "hydra/job_logging=default",
        "++hydra.job.chdir=true",
        "hydra.job.env_set.X=1",
    ],
)
def test_hydra_settings_outside_the_allow_list_are_refused_before_hydra_runs(tmp_path, override):
    _refused(tmp_path, override, names=("Hydra's own settings", override.split("=")[0].lstrip("+")))


def test_a_sweep_keeps_hydra_files_inside_out(tmp_path):
    cwd, out = tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir()
    before = listing(tmp_path, skip=(out,))
    here = os.getcwd()
    os.chdir(cwd)
    try:
        outcome = run_main(STATEAWARE, ["-m", "cohort=demo", f"out={out}", "dry_run=true", "processes=1,2"])
    finally:
        os.chdir(here)
    assert outcome.status == 0, outcome.stderr
    assert outcome.stdout.count("processes would launch") == 2
    assert listing(tmp_path, skip=(out,)) == before
    assert len(list(out.glob(".multirun/*/*/multirun.yaml"))) == 1


def test_hydra_verbose_is_allowed(tmp_path):
    outcome = run_main(STATEAWARE, ["cohort=demo", f"out={tmp_path / 'out'}", "dry_run=true", "hydra.verbose=false"])
    assert outcome.status == 0, outcome.stderr


# -- params and what they refer to -------------------------------------------------------


@pytest.mark.parametrize(
    ("cohort", "override", "names"),
    [
        ("fair44", "cohort.params.anchor_cell=nowhere", ("anchor_cell", "nowhere", "large_sparse")),
        ("fair44", "cohort.params.methods=[eager,joint,eager]", ("params.methods", "without repeats")),
        ("fair44", "cohort.params.anchor_gib.eager=1.0", ("anchor_gib", "min_eager_whole < eager")),
        ("fair44", "+cohort.params.anchor_gib.extra=1.0", ("anchor_gib", "exactly")),
        ("fair44", "cohort.params.steps=1000000000", ("params.steps",)),
        ("semantic", "cohort.params.seed_keys=1000000000000", ("params.seed_keys", "100000")),
        ("semantic", "cohort.params.backends=[torch,torch]", ("params.backends",)),
        ("bytes", "cohort.params.programs=1000000000000", ("params.programs",)),
        ("engines", "cohort.params.complex_step_programs=99999999999", ("params.complex_step_programs",)),
    ],
)
def test_params_and_their_references_are_checked_when_the_run_is_planned(tmp_path, cohort, override, names):
    cwd, out = tmp_path / "cwd", tmp_path / "parent" / "out"
    cwd.mkdir()
    outcome = run_main(STATEAWARE, [f"cohort={cohort}", f"out={out}", "hardware=cpu", override, "dry_run=true"])
    assert outcome.status == 2 and not outcome.traceback and len(outcome.error_lines) == 1, outcome.stderr
    for name in names:
        assert name in outcome.error_lines[0]


def test_an_empty_anchor_mapping_in_a_users_cohort_is_refused(tmp_path):
    conf = tmp_path / "conf" / "cohort"
    conf.mkdir(parents=True)
    fair = (Path(__file__).resolve().parents[1] / "conf" / "cohort" / "fair44.yaml").read_text()
    text = re.sub(r"anchor_gib: \{[^}]*\}", "anchor_gib: {}", fair).replace("name: fair44", "name: mine")
    (conf / "mine.yaml").write_text(text)
    argv = ["--config-dir", str(tmp_path / "conf"), "cohort=mine", f"out={tmp_path / 'out'}", "hardware=cpu"]
    outcome = run_main(STATEAWARE, [*argv, "dry_run=true"])
    assert outcome.status == 2 and not outcome.traceback, outcome.stderr
    assert "params.anchor_gib={}" in outcome.error_lines[-1]


def test_every_count_a_builtin_kind_expands_declares_its_maximum():
    from stateaware.cohorts import load_kind

    kinds = [p.stem for p in (Path(__file__).resolve().parents[1] / "cohorts").glob("*.py") if p.stem[0] != "_"]
    unbounded = [
        f"{kind}.{key}"
        for kind in kinds
        for key, param in (getattr(load_kind(kind), "PARAMS", None) or {}).items()
        if int in (param.type, param.item) and param.maximum is None
    ]
    assert unbounded == []
