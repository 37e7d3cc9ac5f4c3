"""The ``selective`` option: a replay that keeps the expensive ops' outputs, inside our transaction.

A segment run ``selective`` saves the outputs of matmuls, convolutions and attention in
its forward and recomputes only the rest in backward (torch's selective checkpointing
policy), while declared state is restored as for a full replay: a BatchNorm's running
statistics are updated once, gradients are eager's bit for bit.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import stateaware.auto as auto

pytestmark = pytest.mark.usefixtures("one_thread")

#: The forward ops of the expensive kinds here (a Linear's backward uses ``mm``, a
#: convolution's ``convolution_backward``): a full replay runs them again, a selective one does not.
_EXPENSIVE_FORWARD = {torch.ops.aten.addmm.default, torch.ops.aten.convolution.default}


class _Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.expensive = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.expensive += func in _EXPENSIVE_FORWARD
        return func(*args, **(kwargs or {}))


def _convnet() -> nn.Sequential:
    torch.manual_seed(0)

    def block(c: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(), nn.Dropout(0.2))

    return nn.Sequential(block(8), block(8), nn.Sequential(nn.Flatten(), nn.Linear(8 * 8 * 8, 16), nn.Tanh()))


def _step(model: nn.Module, x: torch.Tensor) -> tuple[dict[str, torch.Tensor], int]:
    """One seeded forward and backward: (parameters' gradients, buffers, RNG), and how many
    expensive forward ops the backward ran (replays)."""
    torch.manual_seed(7)
    loss = model(x).square().mean()
    with _Count() as count:
        loss.backward()
    out = {f"grad.{n}": p.grad.clone() for n, p in model.named_parameters()}
    out.update({f"buffer.{n}": b.clone() for n, b in model.named_buffers()})
    out["rng"] = torch.get_rng_state()
    return out, count.expensive


def _forced(model: nn.Module, card, option: str) -> nn.Module:
    plan = dataclasses.replace(auto.plan(card, "100%"), policy=(option,) * card.n_segments)
    return auto.apply(copy.deepcopy(model), plan)


@pytest.fixture(scope="module")
def profiled():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # module scope: the one_thread fixture is function scoped
    model, x = _convnet(), torch.randn(4, 8, 8, 8)
    yield model, x, auto.profile(model, (x,), repeats=1)
    torch.set_num_threads(threads)


def test_selective_replays_no_expensive_op_and_trains_as_eager(profiled):
    model, x, card = profiled
    assert all("selective" in segment for segment in card.segments)
    eager, replays_eager = _step(copy.deepcopy(model), x)
    whole, replays_whole = _step(_forced(model, card, "whole"), x)
    selective, replays_selective = _step(_forced(model, card, "selective"), x)
    assert replays_eager == 0 and replays_whole == 3  # two convolutions and the linear, replayed
    assert replays_selective == 0  # their outputs were kept
    for ours in (whole, selective):  # bit for bit, BatchNorm statistics updated once, the RNG as eager's
        assert ours.keys() == eager.keys()
        for key in eager:
            assert torch.equal(ours[key], eager[key]), key
    # Costed like the others: it keeps what a full replay recomputes (the conv outputs), so
    # it retains more than whole and less than eager (which also keeps the BN's input and mask).
    for segment in card.segments[:2]:
        assert segment["whole"].retained_bytes < segment["selective"].retained_bytes < segment["eager"].retained_bytes


def test_a_segment_torchs_selective_policy_refuses_gets_no_selective_option():
    # An in-place ReLU writes the convolution's kept output: a selective replay would read
    # the written value, so torch refuses it at the replay; profiling says so and goes on.
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(inplace=True)),
        nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU()),
        nn.Flatten(),
    )
    card = auto.profile(model, (torch.randn(2, 4, 8, 8),), repeats=1)
    assert [sorted(segment) for segment in card.segments[:2]] == [["eager", "whole"], ["eager", "selective", "whole"]]
    refused = card.provenance["auto"]["selective_refused"]
    assert list(refused) == ["0"] and "mutated" in refused["0"]
