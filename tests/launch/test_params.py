"""Declared cohort parameters: checked at planning, one line naming the key and what is allowed."""

from __future__ import annotations

import pytest
from stateaware.cohorts import load_kind

from stateaware.launch.params import Param, check_params

KINDS = ("bytes", "cifar", "demo", "derivative", "engines", "joint_alias", "noop", "semantic", "timing")


def test_every_kind_declares_its_params_and_every_shipped_cohort_passes():
    from omegaconf import OmegaConf

    from stateaware.config import packaged_conf_dir

    for kind in KINDS:
        assert isinstance(load_kind(kind).PARAMS, dict), kind
    for path in sorted((packaged_conf_dir() / "cohort").glob("*.yaml")):
        cohort = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        check_params(cohort.get("params") or {}, load_kind(cohort["kind"]).PARAMS, cohort["name"])


def test_planning_a_timing_cohort_checks_its_methods_without_importing_torch():
    import subprocess
    import sys

    code = (
        "import sys; from stateaware.cohorts import load_kind; kind = load_kind('timing'); "
        "print(kind.PARAMS['methods'].choices, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    from stateaware.cost_runtime.methods import METHODS

    assert out.strip() == f"{METHODS} False"


DECLARED = {
    "size": Param(int, minimum=1, maximum=10, required=True),
    "rate": Param(float, minimum=0),
    "mode": Param(str, choices=("a", "b")),
    "methods": Param(list, item=str, choices=("x", "y")),
    "flag": Param(bool),
    "extra": Param(dict, nullable=True),
}


@pytest.mark.parametrize(
    "params, message",
    [
        ({}, "cohort 'c': params.size is missing; allowed values are an integer in [1, 10]"),
        ({"size": 0}, "cohort 'c': invalid params.size=0; allowed values are an integer in [1, 10]"),
        ({"size": 11}, "cohort 'c': invalid params.size=11; allowed values are an integer in [1, 10]"),
        ({"size": 2.0}, "cohort 'c': invalid params.size=2.0; allowed values are an integer in [1, 10]"),
        ({"size": True}, "cohort 'c': invalid params.size=True; allowed values are an integer in [1, 10]"),
        ({"size": 1, "rate": -0.5}, "cohort 'c': invalid params.rate=-0.5; allowed values are a number >= 0"),
        ({"size": 1, "rate": float("nan")}, "cohort 'c': invalid params.rate=nan; allowed values are a number >= 0"),
        ({"size": 1, "mode": "z"}, "cohort 'c': invalid params.mode='z'; allowed values are one of a, b"),
        (
            {"size": 1, "methods": []},
            "cohort 'c': invalid params.methods=[]; allowed values are a non-empty list, each one of x, y",
        ),
        (
            {"size": 1, "methods": ["x", "q"]},
            "cohort 'c': invalid params.methods=['x', 'q']; allowed values are a non-empty list, each one of x, y",
        ),
        (
            {"size": 1, "methods": "x"},
            "cohort 'c': invalid params.methods='x'; allowed values are a non-empty list, each one of x, y",
        ),
        ({"size": 1, "flag": "yes"}, "cohort 'c': invalid params.flag='yes'; allowed values are true or false"),
        ({"size": 1, "extra": [1]}, "cohort 'c': invalid params.extra=[1]; allowed values are a mapping (or null)"),
        (
            {"size": 1, "typo": 1, "other": 2},
            "cohort 'c': unknown parameter(s) params.other, params.typo; "
            "valid parameters are: size, rate, mode, methods, flag, extra",
        ),
    ],
)
def test_bad_params_are_named_with_what_is_allowed(params, message):
    with pytest.raises(ValueError) as error:
        check_params(params, DECLARED, "c")
    assert str(error.value) == message


def test_good_params_pass():
    check_params(
        {"size": 10, "rate": 3, "mode": "b", "methods": ["y", "x"], "flag": False, "extra": None}, DECLARED, "c"
    )
