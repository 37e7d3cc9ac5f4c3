"""stateaware.app.protocol: the CIFAR protocol on plain dicts, without torch."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from stateaware.app.protocol import METHODS, Protocol, budget_bytes, check_card_shape, protocol_from, protocol_of

PARAMS = {"protocols": {"cpu": {"processes": 14, "width": 8, "batch": 32, "threads": 1, "budget_mib": 2}}}


def test_the_profiles_block_gives_the_protocol_and_its_other_keys_stay_the_cohorts():
    block = protocol_of(PARAMS, {"name": "cpu"})
    assert protocol_from(block) == Protocol(width=8, batch=32)
    with pytest.raises(ValueError, match="no entry for hardware 'h100'; valid entries are: cpu"):
        protocol_of(PARAMS, {"name": "h100"})


def test_the_budget_is_absolute_in_mib_and_a_card_of_other_shapes_is_refused():
    assert budget_bytes({"budget_mib": 2}, None) == 2 << 20
    proto = Protocol(width=8, batch=32)
    card = SimpleNamespace(
        digest="d" * 64,
        provenance={"protocol": {"image": 32, "width": 6, "dim": 128, "queue_size": 131072, "batch": 32}},
    )
    with pytest.raises(ValueError, match="was profiled at width=6; the protocol has width=8: freeze a card"):
        check_card_shape(card, proto, "cpu")
    card.provenance["protocol"]["width"] = 8
    assert check_card_shape(card, proto, "cpu") is card


def test_the_method_list_is_the_one_moco_runs_and_the_analysis_names_it_without_torch():
    assert len(METHODS) == 7 and METHODS[4] == "deferred"
    code = (
        "import sys; import stateaware.app.protocol, stateaware.analysis.sections.cifar_application; "
        "print(sorted(m for m in ('torch', 'torchvision') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"
    from stateaware.app import moco

    assert moco.METHODS is METHODS
