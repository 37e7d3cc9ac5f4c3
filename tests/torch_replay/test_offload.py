"""preserve="offload": whole-state preservation with the snapshot in host memory."""

from __future__ import annotations

import pytest
import torch

from stateaware.torch_replay import checkpoint
from stateaware.torch_replay.offload import engine, host_is_device
from stateaware.torch_replay.preserve import _Whole


def _model(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 32),
        torch.nn.BatchNorm1d(32),
        torch.nn.Dropout(0.2),
        torch.nn.ReLU(),
        torch.nn.Linear(32, 8),
    ).to(device)


def _steps(model, how, device, steps=3):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    queue = torch.randn(64, 32, device=device)
    for step in range(steps):
        torch.manual_seed(10 + step)
        x = torch.randn(16, 32, device=device)

        def seg(x):
            h = model[:4](x) + queue.clone()[:16]
            with torch.no_grad():
                queue[16 * step : 16 * step + 16] = h.detach()  # noqa: B023 (replayed within this step)
            return model[4](h)

        optimizer.zero_grad()
        out = seg(x) if how == "eager" else checkpoint(seg, x, state=[model, queue], preserve=how)
        out.square().mean().backward()
        optimizer.step()
    return {
        **{k: v.clone() for k, v in model.state_dict().items()},
        "queue": queue.clone(),
        "rng": torch.get_rng_state(),
    }


def _check(device):
    ref = _steps(_model(device), "eager", device)
    for how in ("offload", "whole"):
        got = _steps(_model(device), how, device)
        for key in ref:
            assert torch.equal(got[key], ref[key]), (how, key)


def test_offload_trains_as_eager_on_cpu():
    _check("cpu")


def test_on_a_cpu_offload_is_a_whole_snapshot_because_host_is_device():
    assert host_is_device("cpu") and not host_is_device("cuda")
    t = torch.randn(8, 4)
    e = engine(t, "t")
    assert type(e) is _Whole and e.retained_bytes == t.numel() * 4
    assert torch.equal(e.snapshot, t)
    assert e.snapshot.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_offload_on_cuda_keeps_a_pinned_host_copy_and_trains_as_eager():
    t = torch.randn(256, 64, device="cuda")
    before = t.clone()
    e = engine(t, "t")
    t.add_(1.0)  # the compute stream waits for the copy: the snapshot holds the old bytes
    torch.cuda.synchronize()
    assert e.snapshot.device.type == "cpu" and e.snapshot.is_pinned()
    assert e.retained_bytes == 0 and e.host_bytes == t.numel() * 4
    assert torch.equal(e.snapshot.cuda(), before)
    e.enter()
    assert torch.equal(t, before)
    e.exit()
    assert torch.equal(t, before + 1.0)
    _check("cuda")
