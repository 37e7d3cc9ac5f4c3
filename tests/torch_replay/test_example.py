"""The README example (examples/batchnorm_dropout.py): BatchNorm + dropout trained under checkpoint."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "examples" / "batchnorm_dropout.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("batchnorm_dropout_example", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def runs(example):
    return {m: example.train(m, steps=4) for m in example.METHODS}


def test_native_checkpoint_updates_running_statistics_twice(example, runs):
    assert runs["plain"]["num_batches_tracked"] == 4
    assert runs["torch"]["num_batches_tracked"] == 8
    assert not example.same_bytes(runs["torch"]["running_mean"], runs["plain"]["running_mean"])
    assert not example.same_bytes(runs["torch"]["running_var"], runs["plain"]["running_var"])


def test_transactional_checkpoint_is_byte_identical_to_plain(example, runs):
    ours, ref = runs["stateaware"], runs["plain"]
    assert ours["num_batches_tracked"] == ref["num_batches_tracked"] == 4
    assert example.same_bytes(ours["running_mean"], ref["running_mean"])
    assert example.same_bytes(ours["running_var"], ref["running_var"])
    assert len(ours["grads"]) == len(ref["grads"]) == 8
    assert all(example.same_bytes(a, b) for a, b in zip(ours["grads"], ref["grads"], strict=True))
    assert all(example.same_bytes(a, b) for a, b in zip(ours["weights"], ref["weights"], strict=True))


def test_undeclared_batchnorm_is_refused(example):
    import torch

    from stateaware.torch_replay import UndeclaredStateError, checkpoint

    net = example.Net()
    with pytest.raises(UndeclaredStateError, match=r"Sequential\.1\.num_batches_tracked \(BatchNorm1d\)"):
        checkpoint(net.block, torch.randn(8, 20))
