"""Profiling leaves a segment's inputs as it found them, and refuses the ones it cannot.

Each measurement runs the segment on the arguments the traced forward gave it: tensors
are put back (bytes and ``.grad``) before every run, containers of them and immutable
values pass, and any other object — here a log a layer appends to — is refused with a
message naming the segment, the argument and its type.
"""

from __future__ import annotations

import enum
from collections import namedtuple

import pytest
import torch
from torch import nn

from stateaware.auto.profiler import check_arguments, profile

Pair = namedtuple("Pair", ["a", "b"])


class Mode(enum.Enum):
    FAST = 1


class Log:
    """A mutable object of the user's: every forward appends to it."""

    def __init__(self) -> None:
        self.seen: list[float] = []


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, log: Log | None = None, **extra: object) -> torch.Tensor:
        if log is not None:
            log.seen.append(float(x.detach().sum()))
        return torch.relu(self.lin(x))


class Logged(nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])
        self.how = how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        log = Log()
        for layer in self.layers:
            if self.how == "positional":
                x = layer(x, log)
            else:
                x = layer(x, extra=[x, {"log": log}])
        return x


@pytest.mark.parametrize(
    "how, where", [("positional", "positional argument 1"), ("nested", r"keyword argument 'extra'\[1\]\['log'\]")]
)
def test_a_mutable_argument_is_refused_by_name(how, where):
    x = torch.randn(2, 16)
    with pytest.raises(ValueError, match=rf"segment 'layers.0' receives {where}, a .*Log: .*Tip: .*use_cache=False"):
        profile(Logged(how), (x,), segments=["layers.0", "layers.1"], repeats=1)


def test_tensors_containers_and_immutable_values_pass():
    x = torch.randn(2, 16)
    fine = (x, [x, (x,)], {"k": x}, Pair(x, None), None, 3, 1.5, "s", torch.float32, torch.device("cpu"), Mode.FAST)
    check_arguments("seg", fine, {"mask": None, "size": torch.Size([2, 3]), "ellipsis": ...})
    with pytest.raises(ValueError, match=r"keyword argument 'fn', a builtins.function"):
        check_arguments("seg", (), {"fn": lambda: None})


SEEN: list[float] = []


class Sees(nn.Module):
    """Notes the input it is given (outside the model, where no snapshot puts it back)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor, pair: tuple[torch.Tensor, None]) -> torch.Tensor:
        SEEN.append(float(x.sum()))
        return self.lin(x) + pair[0].sum()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = Sees()
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        x.mul_(2)  # the model's own code writes its (gradient-free) input in place, as some user code does
        return self.head(self.first(x, (w * 1, None)))


def test_every_run_sees_the_traced_inputs_and_the_example_inputs_are_left_as_they_were():
    torch.manual_seed(0)
    x, w = torch.randn(2, 16), torch.randn(3, requires_grad=True)
    w.grad = torch.ones(3)
    x0, g0 = x.clone(), w.grad
    SEEN.clear()
    profile(Net(), (x, w), segments=["first", "head"], repeats=1)
    assert len(SEEN) > 3 and all(s == SEEN[0] for s in SEEN), SEEN  # every run saw the traced input
    assert torch.equal(x, x0)
    assert w.grad is g0 and torch.equal(w.grad, torch.ones(3))
