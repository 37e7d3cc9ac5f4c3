"""A bug in the user's own model is reported as theirs (NOTE [ The model's own failure ]).

Profiling's first run of the model is its measured all-eager step, in plain eager. When it
raises, ``auto.profile`` and ``auto.wrap`` raise ``ModelStepError``: one paragraph saying the
model's own step failed before any planning, with the original type and message, chained
from the original exception; the model, its gradients, the RNG and the inputs are as given.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import stateaware.auto as auto
from stateaware.auto import ModelStepError
from tests.auto.test_leaves_no_trace import fingerprint


class UserError(Exception):
    """An exception class of the user's own."""


#: Each forward of ``_Counted``, outside the model (profiling restores the model's attributes).
CALLS: list[str] = []


class _Counted(nn.Module):
    """Two linear layers and a running buffer; ``fault`` decides how the forward fails."""

    def __init__(self, fault: str) -> None:
        super().__init__()
        self.fault = fault
        self.first = nn.Linear(6, 6)
        self.second = nn.Linear(6, 6)
        self.register_buffer("seen", torch.zeros(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CALLS.append(self.fault)
        self.seen.add_(x.detach().mean(0))  # a state write before the fault: restored afterwards
        h = torch.sigmoid(self.first(x + 0.01 * torch.randn_like(x)))  # draws from the RNG
        if self.fault == "inplace leaf":
            self.second.weight.mul_(2)  # torch refuses an in-place write to a leaf needing grad
        elif self.fault == "shape":
            h = h[:, :5]
        elif self.fault == "user":
            raise UserError(f"the batch has {x.shape[0]} rows,\n  which my model refuses")
        elif self.fault == "inplace saved":
            h.mul_(2)  # sigmoid saved its output for backward: backward refuses
        return self.second(h)


def _expected(model: nn.Module, x: torch.Tensor) -> BaseException:
    """What plain eager raises for one training step of a copy of ``model``."""
    twin = copy.deepcopy(model)
    try:
        twin(x.clone()).sum().backward()
    except Exception as error:  # noqa: BLE001 - whatever the model raises
        return error
    raise AssertionError("the model did not fail in plain eager")


@pytest.mark.parametrize("fault", ["inplace leaf", "shape", "user", "inplace saved"])
@pytest.mark.parametrize("entry", ["profile", "wrap"])
def test_the_models_own_failure_is_reported_as_its_own_and_changes_nothing(fault, entry):
    torch.manual_seed(0)
    model = _Counted(fault)
    x = torch.randn(4, 6)
    expected = _expected(model, x)
    given_state = {k: v.clone() for k, v in model.state_dict().items()}
    given_x, given_rng, given_shape = x.clone(), torch.get_rng_state(), fingerprint(model)
    CALLS.clear()

    with pytest.raises(ModelStepError) as info:
        if entry == "profile":
            auto.profile(model, (x,), segments=["first", "second"])
        else:
            auto.wrap(model, (x,), budget="50%", segments=["first", "second"])

    kind = type(expected)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    said = " ".join(str(expected).split())
    assert str(info.value) == (
        "_Counted's own training step (forward, then backward of its outputs) failed in plain eager on the "
        f"example inputs, before stateaware planned or changed anything: {name}: {said}. It fails the same "
        "without stateaware (run the model on these inputs and call backward); the original exception and its "
        "traceback are chained above."
    )
    assert "\n" not in str(info.value)
    cause = info.value.__cause__
    assert type(cause) is kind and str(cause) == str(expected)
    assert cause.__traceback__ is not None  # the original traceback is kept, ending in the model
    assert CALLS == [fault]  # the failing step was the first run of the model, and nothing ran again
    assert all(torch.equal(v, given_state[k]) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(x, given_x) and x.grad is None
    assert torch.equal(torch.get_rng_state(), given_rng)
    assert fingerprint(model) == given_shape
    assert torch.is_grad_enabled() and not torch.autograd.profiler._is_profiler_enabled


def test_a_model_that_trains_in_plain_eager_profiles_as_before():
    torch.manual_seed(0)
    model = _Counted("none")
    card = auto.profile(model, (torch.randn(4, 6),), segments=["first", "second"], repeats=1)
    assert card.n_segments == 2 and card.provenance["eager_step_peak_bytes"] > 0


class _OursInside(nn.Module):
    """A model whose forward runs stateaware machinery that refuses it (as a stateaware
    checkpoint inside the model does for undeclared state)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from stateaware.torch_replay import UndeclaredStateError

        raise UndeclaredStateError("segment 'first' writes 'seen'; declare it")


def test_stateawares_own_refusal_inside_the_model_passes_through_unchanged():
    from stateaware.torch_replay import UndeclaredStateError

    with pytest.raises(UndeclaredStateError, match=r"^segment 'first' writes 'seen'; declare it$"):
        auto.profile(_OursInside(), (torch.randn(4, 6),), segments=["first"])
