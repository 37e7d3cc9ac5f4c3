"""stateaware.auto under data parallelism: applied first, then DDP or FSDP2 wraps it.

Two processes on the CPU (gloo), started once for the module: each runs every case and
writes what it found to a file; the tests read those. Cases:

* DDP, torchvision ResNet-18 (BatchNorm): ``auto.wrap`` then ``DistributedDataParallel``
  trains two steps bit-identically to eager DDP on every rank (loss, gradients, weights,
  buffers, RNG state);
* FSDP2, a tiny GPT-2 (dropout): ``auto.wrap`` then ``fully_shard`` per block and root,
  the same comparison on each rank's shards;
* ``auto.wrap`` after DDP or after ``fully_shard``: refused with our message.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import traceback
from pathlib import Path

import pytest
import torch

pytest.importorskip("torchvision")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available in this build", allow_module_level=True)

WORLD = 2


def _fully_shard():
    """``fully_shard`` (torch >= 2.6), or None."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        return None
    return fully_shard


def _identical(eager: dict, wrapped: dict) -> str:
    """'' when both runs are equal byte for byte, else the first difference."""
    for key in ("losses", "grads", "state"):
        if eager[key].keys() != wrapped[key].keys() or not eager[key]:
            return f"{key}: different or empty names"
        for name, a in eager[key].items():
            b = wrapped[key][name]
            if a.dtype != b.dtype or not torch.equal(a, b):
                return f"{key}: {name} differs"
    return "" if torch.equal(eager["rng"], wrapped["rng"]) else "the RNG state differs"


def _local(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return (t.to_local() if isinstance(t, DTensor) else t).detach().clone()


def _train(model: torch.nn.Module, batch, loss_of, steps: int = 2) -> dict:
    """``steps`` SGD steps; per step the loss, then the last step's gradients, then state."""
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(1234)
    losses, grads = {}, {}
    for step in range(steps):
        optimizer.zero_grad(set_to_none=False)
        loss = loss_of(model, *batch(step))
        loss.backward()
        losses[str(step)] = loss.detach().clone()
        grads = {n: _local(p.grad) for n, p in model.named_parameters() if p.grad is not None}
        optimizer.step()
    state = {n: _local(t) for n, t in [*model.named_parameters(), *model.named_buffers()]}
    return {"losses": losses, "grads": grads, "state": state, "rng": torch.get_rng_state()}


def _refusal(wrap_it) -> str:
    """'' when ``auto.wrap`` of what ``wrap_it`` built is refused with our message."""
    import stateaware.auto as auto

    model, x = wrap_it()
    try:
        auto.wrap(model, (x,), budget="0%")
    except ValueError as err:
        return "" if "apply stateaware first, then wrap" in str(err) else f"another message: {err}"
    return "not refused"


def _resnet_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + 10 * step + rank)  # each rank its own data
    return torch.randn(2, 3, 32, 32, generator=g), torch.randint(0, 10, (2,), generator=g)


def _ddp(rank: int) -> str:
    import torchvision
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torchvision.models.resnet import BasicBlock

    import stateaware.auto as auto

    def loss_of(model, x, y):
        return torch.nn.functional.cross_entropy(model(x), y)

    def batch(step: int):
        return _resnet_batch(rank, step)

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10)
    eager = copy.deepcopy(model)
    model.train()
    wrapped, plan = auto.wrap(model, (batch(0)[0],), budget="0%", segments=BasicBlock)
    if all(o == "eager" for o in plan.policy):
        return f"the plan recomputes nothing: {plan.policy}"
    return _identical(_train(DDP(eager), batch, loss_of), _train(DDP(wrapped), batch, loss_of))


def _ddp_refused(rank: int) -> str:
    import torchvision
    from torch.nn.parallel import DistributedDataParallel as DDP

    return _refusal(lambda: (DDP(torchvision.models.resnet18(weights=None)), _resnet_batch(rank, 0)[0]))


def _gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=64, n_positions=16, use_cache=False))


def _sharded(model: torch.nn.Module, fully_shard) -> torch.nn.Module:
    for block in model.transformer.h:
        fully_shard(block)
    fully_shard(model)
    return model


def _gpt2_batch(rank: int, step: int) -> tuple[torch.Tensor]:
    g = torch.Generator().manual_seed(200 + 10 * step + rank)
    return (torch.randint(0, 64, (2, 16), generator=g),)


_NO_FSDP2 = "skip: torch.distributed.fsdp.fully_shard needs torch >= 2.6"


def _fsdp2(rank: int) -> str:
    import stateaware.auto as auto

    fully_shard = _fully_shard()
    if fully_shard is None:
        return _NO_FSDP2

    def loss_of(model, ids):
        return model(input_ids=ids, labels=ids).loss

    def batch(step: int):
        return _gpt2_batch(rank, step)

    model = _gpt2()
    eager = copy.deepcopy(model)
    model.train()
    wrapped, plan = auto.wrap(model, batch(0), budget="0%")  # not a Sequential: "repeated", the blocks
    if plan.card.provenance["auto"]["segments"] != ["transformer.h.0", "transformer.h.1"]:
        return f"unexpected segments {plan.card.provenance['auto']['segments']}"
    if all(o == "eager" for o in plan.policy):
        return f"the plan recomputes nothing: {plan.policy}"
    eager_run = _train(_sharded(eager, fully_shard), batch, loss_of)
    return _identical(eager_run, _train(_sharded(wrapped, fully_shard), batch, loss_of))


def _fsdp2_refused(rank: int) -> str:
    fully_shard = _fully_shard()
    if fully_shard is None:
        return _NO_FSDP2
    return _refusal(lambda: (_sharded(_gpt2(), fully_shard), _gpt2_batch(rank, 0)[0]))


CASES = {"ddp": _ddp, "ddp_refused": _ddp_refused, "fsdp2": _fsdp2, "fsdp2_refused": _fsdp2_refused}


def _worker(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(WORLD), RANK=str(rank))
    os.environ["HF_HUB_OFFLINE"] = "1"
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=WORLD)
    found: dict[str, str] = {}
    try:
        for name, case in CASES.items():
            try:
                found[name] = case(rank)
            except Exception:  # one failing case must not hide the others' results
                found[name] = traceback.format_exc()
    finally:
        Path(out, f"rank{rank}.json").write_text(json.dumps(found))
        torch.distributed.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[dict[str, str]]:
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("distributed")
    mp.spawn(_worker, args=(_free_port(), str(out)), nprocs=WORLD, join=True)
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(WORLD)]


def _check(results: list[dict[str, str]], case: str) -> None:
    for rank, found in enumerate(results):
        if found[case].startswith("skip: "):
            pytest.skip(found[case][len("skip: ") :])
        assert found[case] == "", f"rank {rank}: {found[case]}"


def test_auto_wrap_then_ddp_trains_bit_identically_on_every_rank(results):
    _check(results, "ddp")


def test_auto_wrap_then_fully_shard_trains_bit_identically_on_every_rank(results):
    _check(results, "fsdp2")


def test_auto_wrap_after_ddp_is_refused(results):
    _check(results, "ddp_refused")


def test_auto_wrap_after_fully_shard_is_refused(results):
    _check(results, "fsdp2_refused")
