"""stateaware.auto: profile, plan, apply and wrap a user's model; discovery; no trace.

Models come from tests/auto/auto_models.py: chains of Linear/BatchNorm/Dropout/ReLU blocks
with an EMA center buffer and a ring feature queue with a Python int pointer, as an
``nn.Sequential`` or as named submodules of a custom module.
"""

from __future__ import annotations

import copy

import pytest
import torch

import stateaware.auto as auto
from stateaware.planner import evaluate_policy, min_peak_bytes
from stateaware.torch_replay import UndeclaredStateError
from tests.auto.auto_models import EmaCenter, RingQueue, generated

WIDTH, BATCH = 256, 512

pytestmark = pytest.mark.usefixtures("one_thread")


def _segments(model):
    return model.segment_names() if hasattr(model, "segment_names") else None


def _state(model):
    """Every byte and Python number that training can change."""
    out = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out.update({f"{n}.ptr": m.ptr for n, m in model.named_modules() if isinstance(m, RingQueue)})
    return out


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


def _train(model, steps, seed, width=WIDTH, batch=BATCH):
    """``steps`` SGD steps on seeded batches; returns the RNG state after each step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    states = []
    for step in range(steps):
        torch.manual_seed(seed + step)
        x = torch.randn(batch, width)
        optimizer.zero_grad(set_to_none=False)
        model(x).square().mean().backward()
        optimizer.step()
        states.append(torch.get_rng_state())
    return states


@pytest.mark.parametrize("seed,named", [(0, False), (1, True)])
def test_wrap_trains_bit_identically_and_peaks_follow_the_plan(seed, named):
    model = generated(seed, width=WIDTH, named=named)
    x = torch.randn(BATCH, WIDTH)
    pristine = copy.deepcopy(model)
    wrapped, plan25 = auto.wrap(copy.deepcopy(model), (x,), budget="25%", segments=_segments(model))
    card = plan25.card
    _assert_same(_state(pristine), _state(model))  # wrap profiled a copy; the original is untouched too

    eager_peak = auto.step_peak_bytes(copy.deepcopy(model), (x,))
    eager_predicted, _ = evaluate_policy(card, ("eager",) * card.n_segments)
    plans = {"25%": plan25, "50%": auto.plan(card, "50%"), "75%": auto.plan(card, "75%")}
    assert plans["25%"].predicted_peak_bytes <= plans["50%"].budget_bytes <= plans["75%"].budget_bytes
    assert any(o != "eager" for o in plans["25%"].policy)  # a 25% budget makes it recompute something
    for budget, chosen in plans.items():
        assert chosen.feasible and chosen.predicted_peak_bytes <= chosen.budget_bytes
        applied = wrapped if budget == "25%" else auto.apply(copy.deepcopy(model), chosen)
        measured = auto.step_peak_bytes(copy.deepcopy(applied), (x,))
        predicted_ratio = chosen.predicted_peak_bytes / eager_predicted
        measured_ratio = measured / eager_peak
        assert abs(measured_ratio / predicted_ratio - 1) <= 0.10, (
            budget,
            chosen.policy,
            measured_ratio,
            predicted_ratio,
        )
        eager = copy.deepcopy(model)
        rng_eager = _train(eager, 3, seed=100)
        rng_planned = _train(applied, 3, seed=100)
        _assert_same(_state(eager), _state(applied))
        for a, b in zip(rng_eager, rng_planned, strict=True):
            assert torch.equal(a, b)


def test_profile_leaves_no_trace():
    model = generated(2, width=64, blocks=3)
    x = torch.randn(128, 64)
    model(x).sum().backward()  # gradients, advanced statistics, a moved pointer: all must survive
    for m in model.modules():
        if isinstance(m, RingQueue):
            m.note = ["kept", 1]
    before_state = _state(model)
    before_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    before_attrs = {
        n: {k: copy.copy(v) for k, v in vars(m).items() if not isinstance(v, dict)} for n, m in model.named_modules()
    }
    torch.manual_seed(7)
    rng = torch.get_rng_state()
    auto.profile(model, (x,), repeats=1)
    assert torch.equal(torch.get_rng_state(), rng)
    _assert_same(before_state, _state(model))
    for n, p in model.named_parameters():
        assert torch.equal(p.grad, before_grads[n]), n
    after_attrs = {n: {k: v for k, v in vars(m).items() if not isinstance(v, dict)} for n, m in model.named_modules()}
    assert after_attrs.keys() == before_attrs.keys()
    for n in before_attrs:
        assert after_attrs[n].keys() == before_attrs[n].keys(), n
        for k, v in before_attrs[n].items():
            assert after_attrs[n][k] is v or after_attrs[n][k] == v, (n, k)


def _expected_state(model) -> dict[str, dict[str, object]]:
    """Per segment name: what it writes, by construction of the generated model."""
    out = {}
    for name, seg in model.named_children():
        entries = {}
        for path, m in seg.named_modules():
            where = f"{name}.{path}" if path else name
            if isinstance(m, torch.nn.BatchNorm1d):
                for b in ("running_mean", "running_var", "num_batches_tracked"):
                    entries[f"{where}.{b}"] = "whole"
            if isinstance(m, EmaCenter):
                entries[f"{where}.center"] = "whole"
            if isinstance(m, RingQueue):
                entries[f"{where}.queue"] = "rows"
                entries[f"{where}.ptr"] = "value"
        out[name] = entries
    return out


def test_discovery_finds_every_written_tensor_and_its_rows():
    model = generated(3, width=64, blocks=5)
    card = auto.profile(model, (torch.randn(128, 64),), repeats=1)
    found = card.provenance["auto"]
    assert found["segments"] == [n for n, _ in model.named_children()]
    expected = _expected_state(model)
    tensors = dict(model.named_buffers())
    for name, entries in zip(found["segments"], found["state"], strict=True):
        assert {e["name"]: e["write"] for e in entries} == expected[name], name
        for e in entries:
            if e["kind"] == "buffer":
                assert e["bytes"] == tensors[e["name"]].numel() * tensors[e["name"]].element_size()
        options = set(card.segments[found["segments"].index(name)])
        assert ("region" in options) == any(w == "rows" for w in expected[name].values())
        assert ("offload" in options) == bool(expected[name])
    assert "same memory" in card.provenance["offload_memory"]


def test_an_explicit_incomplete_state_list_names_what_it_misses():
    model = generated(4, width=64, blocks=3)
    x = torch.randn(128, 64)
    ring = next(m for m in model.modules() if isinstance(m, RingQueue))
    ring_name = next(n for n, m in model.named_modules() if m is ring)
    listed = [m for m in model.modules() if isinstance(m, (torch.nn.BatchNorm1d, EmaCenter))]
    with pytest.raises(UndeclaredStateError, match=rf"writes '{ring_name}\.queue'"):
        auto.profile(model, (x,), state=[*listed, f"{ring_name}.ptr"], repeats=1)
    with pytest.raises(UndeclaredStateError, match=rf"writes '{ring_name}\.ptr', a Python attribute"):
        auto.profile(model, (x,), state=[*listed, ring.queue], repeats=1)
    card = auto.profile(model, (x,), state=[*listed, ring], repeats=1)
    assert card.provenance["auto"]["state_discovery"] == "explicit"
    assert sum(len(s) for s in card.provenance["auto"]["state"]) == sum(len(v) for v in _expected_state(model).values())


def test_apply_keeps_state_dict_keys_and_copies_and_remove_undoes_it():
    model = generated(5, width=64, blocks=3)
    x = torch.randn(128, 64)
    keys = list(model.state_dict())
    card = auto.profile(model, (x,), repeats=1)
    chosen = auto.plan(card, "0%")
    assert chosen.predicted_peak_bytes == min_peak_bytes(card.persistent_bytes, [dict(s) for s in card.segments])
    auto.apply(model, chosen)
    assert list(model.state_dict()) == keys
    twin = copy.deepcopy(model)  # the copy runs its own segments under the plan
    fresh = generated(5, width=64, blocks=3)
    twin.load_state_dict(fresh.state_dict())
    _train(twin, 2, seed=3, width=64, batch=128)
    _train(fresh, 2, seed=3, width=64, batch=128)
    _assert_same(_state(fresh), _state(twin))
    auto.remove(model)
    assert all("forward" not in vars(m) for m in model.modules())


def test_plan_reads_bytes_sizes_and_relative_budgets():
    model = generated(6, width=64, blocks=3)
    card = auto.profile(model, (torch.randn(128, 64),), repeats=1)
    least = min_peak_bytes(card.persistent_bytes, [dict(s) for s in card.segments])
    eager, _ = evaluate_policy(card, ("eager",) * card.n_segments)
    assert auto.plan(card, "50%").budget_bytes == least + (eager - least) // 2
    assert auto.plan(card, "100%").budget_bytes == eager and auto.plan(card, "0%").budget_bytes == least
    assert auto.plan(card, "1GiB").budget_bytes == 1 << 30
    assert auto.plan(card, 12345).budget_bytes == 12345
    assert not auto.plan(card, 1).feasible
    with pytest.raises(ValueError, match="infeasible"):
        auto.apply(model, auto.plan(card, 1))
    with pytest.raises(ValueError, match="cannot read budget"):
        auto.plan(card, "half")


def test_segments_must_be_submodules_run_once():
    model = generated(7, width=64, blocks=3, named=True)
    x = torch.randn(32, 64)
    # not a Sequential: the default takes the repeated blocks of its containers
    card = auto.profile(model, (x,), repeats=1)
    assert card.provenance["auto"]["segments"] == [f"body.{i}" for i in range(len(model.body))]
    with pytest.raises(ValueError, match="'nope' is not a submodule"):
        auto.profile(model, (x,), segments=["stem", "nope"])
    with pytest.raises(ValueError, match="lies inside segment 'body'"):
        auto.profile(model, (x,), segments=["body", "body.0"])


@pytest.mark.parametrize("option", ["whole", "region", "offload", "selective"])
def test_every_option_trains_bit_identically(option):
    # Timing decides which option a plan picks; here each is forced wherever a segment has it.
    import dataclasses

    model = generated(8, width=64, blocks=4)
    x = torch.randn(128, 64)
    card = auto.profile(model, (x,), repeats=1)
    policy = tuple(option if option in seg else "whole" for seg in card.segments)
    assert option in policy
    forced = dataclasses.replace(auto.plan(card, "100%"), policy=policy)
    applied = auto.apply(copy.deepcopy(model), forced)
    eager = copy.deepcopy(model)
    rng_eager = _train(eager, 3, seed=5, width=64, batch=128)
    rng_applied = _train(applied, 3, seed=5, width=64, batch=128)
    _assert_same(_state(eager), _state(applied))
    assert all(torch.equal(a, b) for a, b in zip(rng_eager, rng_applied, strict=True))


class _Cell(torch.nn.Module):
    """A segment whose forward takes a keyword named ``state`` (as recurrent cells do)."""

    def __init__(self, width: int):
        super().__init__()
        self.lin = torch.nn.Linear(width, width)
        self.bn = torch.nn.BatchNorm1d(width)

    def forward(self, x, state=None):
        return torch.tanh(self.bn(self.lin(x)) + state)


class _WithCells(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.a, self.b = _Cell(width), _Cell(width)

    def forward(self, x):
        h = torch.zeros_like(x)
        return self.b(x, state=self.a(x, state=h))


def test_a_segments_own_state_keyword_reaches_its_forward():
    torch.manual_seed(3)
    model = _WithCells(64)
    x = torch.randn(128, 64)
    card = auto.profile(model, (x,), segments=["a", "b"], repeats=1)
    import dataclasses

    applied = auto.apply(copy.deepcopy(model), dataclasses.replace(auto.plan(card, "100%"), policy=("whole", "whole")))
    eager = copy.deepcopy(model)
    _train(eager, 2, seed=9, width=64, batch=128)
    _train(applied, 2, seed=9, width=64, batch=128)
    _assert_same(_state(eager), _state(applied))
