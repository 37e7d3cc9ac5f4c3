"""The model matrix (``tests/model_zoo.py``): real architectures trained with stateaware.

Each model is trained two SGD steps three ways from the same seed: eagerly, through the
automatic path (``stateaware.auto.wrap`` with no state declared and segments found by
block type; for Hugging Face models ``stateaware.integrations.transformers.enable``), and
with our checkpoint around every block declaring the block as its state. Losses, every
gradient, every ``state_dict`` entry (BatchNorm statistics and counters included) and the
RNG state must be equal byte for byte. The automatic path's budget loop must keep the
budget as measured: one step's measured peak at most the plan's budget, and within 5 %
of the closed loop's prediction. The Mixture-of-Experts models (router jitter on, router
logits recorded for the auxiliary loss) and DenseNet (its layers read a feature list the
block grows after each call) carry the patterns a replay most easily gets wrong.
"""

from __future__ import annotations

import pytest

from tests import model_zoo as zoo

pytest.importorskip("torchvision")
pytest.importorskip("timm")
pytest.importorskip("transformers")

BUDGET = "50%"
#: Models whose plan at ``BUDGET`` must recompute at least one block: a block refused by
#: our checkpoint (Mixtral's router once was) would leave the plan all eager.
MUST_RECOMPUTE = ("mixtral",)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("name", zoo.CI_CASES)
def test_automatic_and_declared_training_are_bit_identical_to_eager_and_keep_the_budget(name):
    case = zoo.CASES[name]
    eager = zoo.train(case, case.build())
    model, plan = zoo.automatic(case, BUDGET, repeats=1)
    assert plan.measured_peak_bytes is not None
    assert plan.measured_peak_bytes <= plan.budget_bytes, (plan.measured_peak_bytes, plan.budget_bytes)
    assert abs(plan.measured_peak_bytes - plan.predicted_peak_bytes) <= 0.05 * plan.measured_peak_bytes
    if name in MUST_RECOMPUTE:
        assert any(option != "eager" for option in plan.policy), plan.policy
    zoo.assert_identical(eager, zoo.train(case, model))
    zoo.assert_identical(eager, zoo.train(case, zoo.checkpoint_blocks(case, declare=True)))
