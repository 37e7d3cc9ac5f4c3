"""At every budget, the fastest plan: ``stateaware.auto`` against what a user would otherwise pick.

Side by side in one process, on three models built from small configs with random init
(nothing downloaded), each wrapped so that its forward returns the training loss (so the
budget loop measures exactly the step every method is timed on):

* a transformers GPT-2 (4 layers, n_embd 256, 4 heads, vocab 8192, seq 128, batch 8;
  dropout off, so a compiled arm's gradient difference is rounding, not another mask);
* a timm ViT-tiny (``vit_tiny_patch16_224`` at 96x96, batch 16);
* a torchvision resnet18 (64x64, batch 16; BatchNorm in every block).

Methods, each on the model's repeated blocks (``segments="repeated"``):

* ``eager``; ``checkpoint`` — torch's ``checkpoint_wrapper`` (non-reentrant) on every
  block; ``SAC`` — the same with ``create_selective_checkpoint_contexts`` saving the
  outputs of matmul, convolution and attention (the rest recomputed);
* ``compile@B`` — ``torch.compile`` of the whole model (inductor) with
  ``torch._functorch.config.activation_memory_budget = B`` for B in 0.7, 0.5, 0.3;
* ``ours@30/50/70%`` — ``stateaware.auto``'s budget loop at relative budgets, and
  ``ours@<rival>`` — given each rival's measured peak as an absolute budget (eager code:
  the eager-exact arm);
* ``ours+compile@<compile@B>`` — ``compile={"backend": "inductor"}`` (each block compiled
  regionally, our plan around it), given each compile budget's measured peak.

Clock: the median over ``--rounds`` interleaved rounds (every method one step per round,
so a shared machine slows them alike; each round in a shuffled order, seeded, so no method
keeps its place or its neighbour) of the thread's CPU time (``time.thread_time``) and
of wall time, on ``--threads`` threads (1 by default). Peaks: ``stateaware.auto.step_peak_bytes``
for every method (bytes live at the step's start plus the CPU profiler's window peak).
Gradients: after one step from the same weights, bitwise equal to eager's (eager-exact
arms) or the largest absolute difference (compiled arms). BatchNorm: how many times one
step advanced ``num_batches_tracked`` (1 is eager's; a replay that updates the statistics
again shows 2). The issue's targets are printed with a verdict per model.

Memory reuse: by default the bench re-runs itself with glibc's malloc told to keep freed
memory (``MALLOC_MMAP_MAX_=0``, ``MALLOC_TRIM_THRESHOLD_`` 16 GiB), as CUDA's caching
allocator does. Left to its defaults glibc maps each tensor over 32 MiB (GPT-2's logits)
afresh and returns it on free, so every step page-faults it in again, and how often
depends on the heap's history in this process: identical op sequences (same ops, same
counts, by the profiler) then differed by 3-6 % in CPU time between two arms, all of it in
the memory-bound ops on those tensors. ``--malloc glibc`` keeps the defaults.

Usage: ``python bench/bench_budget.py [--rounds 7] [--models gpt2,vit,resnet18] [--threads 1]``;
``--quick`` runs tiny models, two rounds and one compile budget with the
``aot_eager_decomp_partition`` backend (CI's smoke test: seconds, not a measurement).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import stateaware.auto as auto  # noqa: E402
from bench.bench_auto import _torch_variant  # noqa: E402
from stateaware.auto.fit import BudgetNotKept  # noqa: E402
from stateaware.auto.segment import select_segments  # noqa: E402
from stateaware.torch_replay.selective import EXPENSIVE_OPS  # noqa: E402

RELATIVE = ("30%", "50%", "70%")
COMPILE_BUDGETS = (0.7, 0.5, 0.3)
#: Ops whose outputs SAC keeps (matmul, convolution, attention; everything else is
#: recomputed): the op list of our own selective option, so both keep the same outputs.
SAVED_OPS = EXPENSIVE_OPS
TRANSFORMERS = ("gpt2", "vit")
#: glibc's malloc keeping freed memory for reuse (module docstring, "Memory reuse").
STEADY_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(16 * 2**30)}
MALLOC_DOC = {
    "steady": "glibc keeping freed memory (MALLOC_MMAP_MAX_=0, MALLOC_TRIM_THRESHOLD_=16 GiB)",
    "glibc": "glibc's defaults",
}


class Loss(torch.nn.Module):
    """``model`` whose forward returns the training loss: ``loss(model(x), y)``."""

    def __init__(self, model: torch.nn.Module, loss: Callable[[Any, torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss(self.model(x), y)


def _lm_loss(out: Any, labels: torch.Tensor) -> torch.Tensor:
    logits = out.logits[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))


@dataclass
class Spec:
    name: str
    build: Callable[[], torch.nn.Module]
    example: tuple[torch.Tensor, torch.Tensor]
    segments: Any = "repeated"  # the blocks, as stateaware.auto.segment.select_segments takes them


def _gpt2(quick: bool) -> Spec:
    import transformers

    layers, width, seq, batch, vocab = (2, 32, 16, 2, 128) if quick else (4, 256, 128, 8, 8192)
    cfg = transformers.GPT2Config(
        n_layer=layers, n_embd=width, n_head=4, n_positions=seq, vocab_size=vocab, bos_token_id=0, eos_token_id=0,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
    )  # fmt: skip
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        return Loss(transformers.GPT2LMHeadModel(cfg), _lm_loss)

    return Spec(f"GPT-2 ({layers} layers, n_embd {width}, seq {seq}, batch {batch})", build, (ids, ids))


def _images(side: int, batch: int, classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(batch, 3, side, side, generator=g), torch.randint(0, classes, (batch,), generator=g)


def _vit(quick: bool) -> Spec:
    import timm

    side, batch, depth = (32, 2, 2) if quick else (96, 16, 12)

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10, img_size=side, depth=depth)
        return Loss(vit, F.cross_entropy)

    return Spec(f"ViT-tiny ({side}x{side}, depth {depth}, batch {batch})", build, _images(side, batch))


def _resnet18(quick: bool) -> Spec:
    import torchvision

    side, batch, layers = (16, 4, [1, 1, 1, 1]) if quick else (64, 16, [2, 2, 2, 2])

    def build() -> torch.nn.Module:
        torch.manual_seed(0)
        net = torchvision.models.resnet.ResNet(torchvision.models.resnet.BasicBlock, layers, num_classes=10)
        return Loss(net, F.cross_entropy)

    name = "resnet18" if not quick else "ResNet, one BasicBlock per stage"
    blocks = torchvision.models.resnet.BasicBlock
    return Spec(f"{name} ({side}x{side}, batch {batch}, BatchNorm)", build, _images(side, batch), blocks)


MODELS = {"gpt2": _gpt2, "vit": _vit, "resnet18": _resnet18}


def _sac_policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op in SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def _sac_context() -> Any:
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(_sac_policy)


def _every_block(model: torch.nn.Module, names: list[str], **checkpoint_kwargs: Any) -> torch.nn.Module:
    if not checkpoint_kwargs:
        return _torch_variant(model, names)
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    targets = {id(model.get_submodule(name)) for name in names}
    apply_activation_checkpointing(
        model,
        checkpoint_wrapper_fn=lambda m: checkpoint_wrapper(
            m, checkpoint_impl=CheckpointImpl.NO_REENTRANT, **checkpoint_kwargs
        ),
        check_fn=lambda m: id(m) in targets,
    )
    return model


def _compiled(model: torch.nn.Module, budget: float, backend: str) -> torch.nn.Module:
    # Dynamo's guards do not include the partitioner's memory budget: a second model of the
    # same class would reuse the first one's graphs. A class of its own per budget fails
    # the type guard, so each budget compiles (at its first step, inside _first_step's patch).
    model.__class__ = type(f"{type(model).__name__}_budget{budget}", (type(model),), {})
    compiled = torch.compile(model, backend=backend)
    compiled._bench_budget = budget  # type: ignore[attr-defined]  # read by _first_step
    return compiled


@dataclass
class Row:
    method: str
    arm: str  # "rival", "eager-exact", "compiled"
    model: torch.nn.Module | None
    given: str = ""  # the budget ours was given
    plan: Any = None
    refused: str | None = None
    peak: int = 0
    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    grads: list[torch.Tensor] = field(default_factory=list)
    bn_updates: int | None = None


def _zero(model: torch.nn.Module) -> None:
    for p in model.parameters():
        p.grad = None


def _step(model: torch.nn.Module, example: tuple[Any, ...]) -> None:
    model(*example).backward()


def _bn_tracked(model: torch.nn.Module) -> list[int]:
    return [int(m.num_batches_tracked) for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]


def _first_step(row: Row, example: tuple[Any, ...]) -> None:
    """The check step: from the shared initial weights, gradients and BatchNorm updates."""
    model = row.model
    assert model is not None
    before = _bn_tracked(model)
    _zero(model)
    budget = getattr(model, "_bench_budget", None)
    if budget is None:
        _step(model, example)
    else:
        with torch._functorch.config.patch(activation_memory_budget=budget):
            _step(model, example)  # compiles, the partitioner reading the budget
    row.grads = [p.grad.detach().clone() for p in model.parameters()]
    after = _bn_tracked(model)
    row.bn_updates = max((a - b for a, b in zip(after, before, strict=True)), default=None)


def _ours(
    base: Callable[[], torch.nn.Module], example: tuple[Any, ...], card: Any, budget: int | str, method: str, arm: str
) -> Row:
    model = base()
    try:
        chosen = auto.fit_applied(model, example, card, budget)
    except BudgetNotKept as error:
        return Row(method, arm, None, given=_given(budget), refused=str(error).split(". Tip")[0])
    return Row(method, arm, auto.apply(model, chosen), given=_given(budget), plan=chosen)


def _given(budget: int | str) -> str:
    return budget if isinstance(budget, str) else f"{budget / 2**20:.2f} MiB"


def run_model(spec: Spec, rounds: int, quick: bool) -> list[Row]:
    """Every method on one model (module docstring); rows in table order."""
    # Each model compiles afresh: the three share the wrapper's forward (Loss.forward), and
    # Dynamo's per-code cache limit would otherwise run a later model's methods uncompiled.
    torch._dynamo.reset()
    example = spec.example
    names = select_segments(spec.build(), spec.segments)
    backend = "aot_eager_decomp_partition" if quick else "inductor"
    budgets = (0.5,) if quick else COMPILE_BUDGETS
    rows = [
        Row("eager", "rival", spec.build()),
        Row("checkpoint, every block", "rival", _every_block(spec.build(), names)),
        Row("SAC, every block", "rival", _every_block(spec.build(), names, context_fn=_sac_context)),
        *[Row(f"compile@{b}", "rival", _compiled(spec.build(), b, backend)) for b in budgets],
    ]
    for row in rows:
        _first_step(row, example)
        row.peak = auto.step_peak_bytes(row.model, example)
    card = auto.profile(spec.build(), example, segments=names, repeats=1 if quick else 3)
    for budget in RELATIVE:
        rows.append(_ours(spec.build, example, card, budget, f"ours@{budget}", "eager-exact"))
    for rival in [r for r in rows if r.arm == "rival" and r.method != "eager"]:
        rows.append(_ours(spec.build, example, card, rival.peak, f"ours@{rival.method}", "eager-exact"))
    ours_backend = "aot_eager" if quick else "inductor"
    compiled_card = auto.profile(
        spec.build(), example, segments=names, repeats=1 if quick else 3, compile={"backend": ours_backend}
    )
    for rival in [r for r in rows if r.method.startswith("compile@")]:
        rows.append(_ours(spec.build, example, compiled_card, rival.peak, f"ours+compile@{rival.method}", "compiled"))
    for row in rows:
        if row.arm != "rival" and row.model is not None:
            _first_step(row, example)
            row.peak = auto.step_peak_bytes(row.model, example)
    live = [r for r in rows if r.model is not None]
    order = random.Random(0)
    for _ in range(rounds):  # interleaved: each method one step per round, in an order drawn per round
        for row in order.sample(live, len(live)):
            _zero(row.model)
            w, c = time.perf_counter(), time.thread_time()
            _step(row.model, example)
            row.cpu.append((time.thread_time() - c) * 1e3)
            row.wall.append((time.perf_counter() - w) * 1e3)
    return rows


def _grad_check(row: Row, eager: Row) -> str:
    pairs = list(zip(row.grads, eager.grads, strict=True))
    if row.method.startswith("compile@") or row.arm == "compiled":
        # Relative to the largest gradient: BatchNorm over few values amplifies rounding.
        scale = max(float(b.abs().max()) for _, b in pairs) or 1.0
        return f"max diff {max(float((a - b).abs().max()) for a, b in pairs) / scale:.1e} (relative)"
    return "bitwise" if all(torch.equal(a, b) for a, b in pairs) else "DIFFER"


def table(spec: Spec, rows: list[Row]) -> str:
    """The Markdown table of one model's rows."""
    eager = rows[0]
    cpu0, wall0 = statistics.median(eager.cpu), statistics.median(eager.wall)
    lines = [
        f"### {spec.name}",
        "",
        "| method | budget given | peak MiB (×eager) | CPU ms (×eager) | wall ms (×eager) | gradients vs eager "
        "| BatchNorm updates per step | plan |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.refused is not None:
            lines.append(f"| {r.method} | {r.given} | refused: {r.refused} | | | | | |")
            continue
        cpu, wall = statistics.median(r.cpu), statistics.median(r.wall)
        bn = "—" if r.bn_updates is None else str(r.bn_updates)
        plan = "" if r.plan is None else " ".join(o[0] for o in r.plan.policy)
        lines.append(
            f"| {r.method} | {r.given} | {r.peak / 2**20:.2f} ({r.peak / eager.peak:.3f}) "
            f"| {cpu:.1f} ({cpu / cpu0:.2f}) | {wall:.1f} ({wall / wall0:.2f}) "
            f"| {_grad_check(r, eager)} | {bn} | {plan} |"
        )
    return "\n".join(lines)


def _time(row: Row) -> float:
    return statistics.median(row.cpu)


def targets(key: str, rows: list[Row]) -> list[str]:
    """Each of the issue's targets on this model: met or missed, by how much."""
    by = {r.method: r for r in rows}
    eager = by["eager"]
    has_state = eager.bn_updates is not None  # BatchNorm: state our checkpoint declares
    out = []

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    for rival in [r for r in rows if r.arm == "rival" and r.method != "eager"]:
        ours = by[f"ours@{rival.method}"]
        if ours.refused is not None:
            out.append(f"eager-exact at {rival.method}'s peak: MISSED (refused: {ours.refused})")
            continue
        ratio = ours.peak / rival.peak
        exact = _grad_check(ours, eager) == "bitwise" and ours.bn_updates in (None, 1)
        line = f"eager-exact at {rival.method}'s peak: peak {ratio:.3f}x (<= 1.01: {verdict(ratio <= 1.01)}), "
        line += f"bit-identical to eager: {verdict(exact)}"
        limit = None
        if rival.method.startswith("SAC"):
            limit = 1.00
        elif rival.method.startswith("checkpoint"):
            limit = 1.10 if has_state else 1.00
        if limit is not None:
            t = _time(ours) / _time(rival)
            line += f", CPU time {t:.3f}x (<= {limit:.2f}: {verdict(t <= limit)})"
        out.append(line)
    for rival in [r for r in rows if r.method.startswith("compile@")]:
        ours = by[f"ours+compile@{rival.method}"]
        if ours.refused is not None:
            out.append(f"compiled arm at {rival.method}'s peak: MISSED (refused: {ours.refused})")
            continue
        ratio, t = ours.peak / rival.peak, _time(ours) / _time(rival)
        line = f"compiled arm at {rival.method}'s peak: peak {ratio:.3f}x (<= 1.01: {verdict(ratio <= 1.01)}), "
        line += f"CPU time {t:.3f}x"
        line += f" (<= 1.00: {verdict(t <= 1.00)})" if key in TRANSFORMERS else " (reported, no target)"
        out.append(line)
    # Every absolute budget ours is given is a peak some method measured (it met it).
    refused = [r.method for r in rows if r.refused is not None]
    out.append(
        f"no refusal at a budget some method met: {verdict(not refused)}"
        + (f" ({', '.join(refused)})" if refused else "")
    )
    return out


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"


def model_keys(parser: argparse.ArgumentParser, models: str) -> list[str]:
    """The comma-separated ``--models``, each checked against ``MODELS`` (``parser.error`` else)."""
    keys = models.split(",")
    unknown = [k for k in keys if k not in MODELS]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; valid models are: {', '.join(MODELS)}")
    return keys


def steady_malloc(argv: list[str] | None) -> str:
    """Have glibc keep freed memory (``STEADY_MALLOC``); the ``MALLOC_DOC`` key in effect.

    glibc reads the settings once, at start: run as a command (``argv`` None) without them,
    this runs the command again with them and does not return. Called in a process of
    someone else's (a test), the allocator stays as it is: ``"glibc"``."""
    if all(os.environ.get(k) == v for k, v in STEADY_MALLOC.items()):
        return "steady"
    if argv is None:
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **STEADY_MALLOC})
    return "glibc"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (median kept)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of: {', '.join(MODELS)}")
    parser.add_argument("--quick", action="store_true", help="tiny models, 2 rounds, one compile budget (CI smoke)")
    parser.add_argument(
        "--malloc",
        choices=("steady", "glibc"),
        default="steady",
        help="steady: glibc keeps freed memory for reuse (the default; see the module docstring); glibc: its defaults",
    )
    args = parser.parse_args(argv)
    keys = model_keys(parser, args.models)
    malloc = steady_malloc(argv) if args.malloc == "steady" else "glibc"
    rounds = 2 if args.quick else args.rounds
    torch.set_num_threads(args.threads)
    # A compiled method silently run in eager code would be reported as compiled: refuse it.
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    print(
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; {_machine()}; torch {torch.__version__}; "
        f"{args.threads} thread(s); medians of {rounds} interleaved rounds; clock: thread CPU time "
        f"(time.thread_time) and wall; malloc: {MALLOC_DOC[malloc]}{'; --quick' if args.quick else ''}"
    )
    print("plan letters: e=eager w=whole r=region o=offload s=selective\n")
    for key in keys:
        start = time.perf_counter()
        spec = MODELS[key](args.quick)
        rows = run_model(spec, rounds, args.quick)
        print(table(spec, rows))
        print()
        for line in targets(key, rows):
            print(f"- {line}")
        print(f"\n({time.perf_counter() - start:.0f} s)\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
