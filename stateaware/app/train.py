"""One method at one seed: encoder epochs, validation, checkpoint, then the probe (paper §12).

``train_encoder`` is the *complete encoder process* the paper times: building the
encoders, every encoder epoch (training and validation), the canonical encoder
checkpoint. ``probe`` is separate: it loads the encoder by its hash, fits a linear
classifier on frozen features of the fitting images, and scores the official test images
once (test data select no epoch). Every random draw comes from the seed and epoch (augment
crops and flips, batch order), so every method sees the same data in the same order.

Observation (``Observer``): on CUDA the allocator's allocated and reserved peaks are read
before every ``reset_peak_memory_stats`` (one per encoder epoch) and once at exit; on the
CPU the profiler's window peak of each epoch plus the bytes live when it opens
(``stateaware.cost_runtime.measure.window_peak``), source ``torch_profiler``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from stateaware.app import moco, scores
from stateaware.app.model import backbone_features, cifar_resnet18, feature_dim, l2_normalize
from stateaware.app.protocol import Protocol
from stateaware.cost_runtime.measure import window_peak

__all__ = ["Observer", "augment", "center", "train_encoder", "probe", "deterministic"]

#: CIFAR-100 channel statistics of the training set (input normalisation constants).
_MEAN = (0.5071, 0.4865, 0.4409)
_STD = (0.2673, 0.2564, 0.2762)


@contextlib.contextmanager
def deterministic(threads: int | None = None) -> Iterator[None]:
    """Deterministic algorithms, no cuDNN benchmarking (and ``threads`` intra-op threads
    when given) inside the ``with`` block; the previous settings come back on exit, so a
    run in the caller's process (``launcher=inline``, tests) leaves it as it was.

    Sets ``CUBLAS_WORKSPACE_CONFIG`` (unless set) as CUDA's deterministic cuBLAS needs;
    it takes effect only if cuBLAS has not been initialised yet in this process.
    """
    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
        torch.get_num_threads(),
    )
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    if threads is not None:
        torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.backends.cudnn.benchmark = saved[2]
        torch.set_num_threads(saved[3])


def _normalise(x: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(_MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(_STD, device=x.device).view(1, 3, 1, 1)
    return (x.float() / 255.0 - mean) / std


def augment(images: torch.Tensor, size: int, gen: torch.Generator) -> torch.Tensor:
    """Random ``size`` crops of the 4-pixel zero-padded ``N x 3 x 32 x 32`` uint8 images,
    flipped horizontally with probability 1/2, normalised (draws from ``gen``, CPU)."""
    n, _, h, w = images.shape
    padded = nn.functional.pad(images, (4, 4, 4, 4))
    oy = torch.randint(0, h + 8 - size + 1, (n,), generator=gen)
    ox = torch.randint(0, w + 8 - size + 1, (n,), generator=gen)
    flip = torch.rand(n, generator=gen) < 0.5
    ar = torch.arange(size)
    ys = (oy[:, None] + ar)[:, None, :, None].expand(n, 3, size, size)
    xs = ox[:, None] + ar
    xs = torch.where(flip[:, None], xs.flip(1), xs)[:, None, None, :].expand(n, 3, size, size)
    rows = padded.gather(2, ys[..., :1].expand(n, 3, size, padded.shape[3]))
    crop = rows.gather(3, xs)
    return _normalise(crop)


def center(images: torch.Tensor, size: int) -> torch.Tensor:
    """The central ``size`` crop, normalised (evaluation view)."""
    o = (images.shape[2] - size) // 2
    return _normalise(images[:, :, o : o + size, o : o + size])


@dataclass
class Observer:
    """Allocator peaks before every reset and once at exit (see the module docstring)."""

    device: torch.device
    live: Callable[[], int]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def window(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` as one observed window ending in a reset; its result."""
        if self.device.type == "cuda":
            out = fn()
            torch.cuda.synchronize(self.device)
            self._record(
                "before_reset",
                torch.cuda.max_memory_allocated(self.device),
                torch.cuda.max_memory_reserved(self.device),
                "cuda_allocator",
            )
            torch.cuda.reset_peak_memory_stats(self.device)
            return out
        start = self.live()
        box: list[Any] = []
        peak, _ = window_peak(lambda: box.append(fn()))
        self._record("before_reset", start + peak, None, "torch_profiler")
        return box[0]

    def exit(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self._record(
                "exit",
                torch.cuda.max_memory_allocated(self.device),
                torch.cuda.max_memory_reserved(self.device),
                "cuda_allocator",
            )
        else:
            peak = max((r["peak_allocated_bytes"] for r in self.rows), default=self.live())
            self._record("exit", peak, None, "torch_profiler")

    def _record(self, event: str, allocated: int, reserved: int | None, source: str) -> None:
        self.rows.append(
            {
                "event": event,
                "event_index": len(self.rows),
                "peak_allocated_bytes": int(allocated),
                "peak_reserved_bytes": None if reserved is None else int(reserved),
                "peak_source": source,
            }
        )


def _epoch_gen(seed: int, epoch: int, salt: int) -> torch.Generator:
    return torch.Generator().manual_seed((int(seed) * 1_000_003 + epoch * 7919 + salt) % (2**63))


def _batches(n: int, batch: int, gen: torch.Generator) -> list[torch.Tensor]:
    order = torch.randperm(n, generator=gen)
    return [order[i : i + batch] for i in range(0, n, batch)]  # every image once: the last batch may be short


def train_encoder(
    images: torch.Tensor,
    val_images: torch.Tensor,
    *,
    seed: int,
    method: str,
    policy: Sequence[str],
    proto: Protocol,
    device: torch.device,
    out: Path,
    observer: Observer | None = None,
) -> dict[str, Any]:
    """Train the encoders on ``images`` (uint8 NCHW, CPU) under ``method``; write the
    canonical encoder file under ``out``. Returns ``{"epochs", "sha256", "path", "seconds"}``.

    ``observer`` (optional) wraps every step (``proto.peaks == "step"``) or every epoch in
    an observed window ending in a reset; its ``live`` callable is set here. Every
    training image is visited once per epoch (the last batch may be short; the queue
    ring advances by the keys actually enqueued).
    """
    start = time.perf_counter()
    m = moco.build(
        seed,
        width=proto.width,
        dim=proto.dim,
        queue_size=proto.queue_size,
        temperature=proto.temperature,
        momentum=proto.momentum,
        device=device,
    )
    opt = torch.optim.SGD(m.query.parameters(), lr=proto.lr, momentum=0.9, weight_decay=proto.weight_decay)
    if observer is not None:
        observer.live = lambda: moco.persistent_bytes(m, opt)
    if proto.peaks not in ("step", "epoch"):
        raise ValueError(f"Protocol.peaks={proto.peaks!r}; valid values are: step, epoch")
    epochs, step, enqueued = [], 0, 0
    for epoch in range(proto.encoder_epochs):
        t0, c0 = time.perf_counter(), time.process_time()
        gen = _epoch_gen(seed, epoch, 1)
        first = len(observer.rows) if observer is not None else 0

        # one_step and one_epoch run within this iteration (below), so the `gen` they read is
        # this epoch's: B023's late binding cannot happen here.
        def one_step(idx: torch.Tensor) -> float:
            nonlocal step, enqueued
            x = images[idx]
            x_q = augment(x, proto.image, gen).to(device)  # noqa: B023 (see above)
            x_k = augment(x, proto.image, gen).to(device)  # noqa: B023
            loss = moco.train_step(m, opt, x_q, x_k, step, method, policy, offset=enqueued)
            step, enqueued = step + 1, enqueued + len(idx)
            return loss

        def one_epoch() -> list[float]:
            m.query.train(), m.key.train()
            batches = _batches(len(images), proto.batch, gen)  # noqa: B023
            if observer is not None and proto.peaks == "step":
                return [observer.window(lambda idx=idx: one_step(idx)) for idx in batches]
            return [one_step(idx) for idx in batches]

        use_epoch_window = observer is not None and proto.peaks == "epoch"
        losses = observer.window(one_epoch) if use_epoch_window else one_epoch()
        val = _validate(m, val_images, proto, device, _epoch_gen(seed, epoch, 2))
        row = {
            "phase": "encoder",
            "epoch": epoch,
            "loss": float(np.mean(losses)) if losses else float("nan"),
            "accuracy": val,
            "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0,
        }
        seen = observer.rows[first:] if observer is not None else []
        if seen:
            reserved = [r["peak_reserved_bytes"] for r in seen if r["peak_reserved_bytes"] is not None]
            row.update(
                {
                    "peak_allocated_bytes": max(r["peak_allocated_bytes"] for r in seen),
                    "peak_reserved_bytes": max(reserved) if reserved else None,
                    "peak_source": seen[0]["peak_source"],
                }
            )
        epochs.append(row)
    path = out / "encoder.bin"
    sha = scores.write_encoder(m.query.state_dict(), path)
    if observer is not None:
        observer.exit()
    return {
        "epochs": epochs,
        "sha256": sha,
        "path": path,
        "seconds": time.perf_counter() - start,
        "queue_sha256": _tensor_sha(m.queue),
    }


def _tensor_sha(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


@torch.no_grad()
def _validate(
    m: moco.Moco, images: torch.Tensor, proto: Protocol, device: torch.device, gen: torch.Generator
) -> float | None:
    """Top-1 accuracy of the key among (key + queue) on validation pairs (no enqueue)."""
    if len(images) == 0:
        return None
    m.query.eval(), m.key.eval()
    hits = total = 0
    for i in range(0, len(images), proto.batch):
        x = images[i : i + proto.batch]
        q = l2_normalize(m.query(augment(x, proto.image, gen).to(device)))
        k = l2_normalize(m.key(augment(x, proto.image, gen).to(device)))
        logits = torch.cat([(q * k).sum(1, keepdim=True), q @ m.queue.t()], dim=1)
        hits += int((logits.argmax(1) == 0).sum())
        total += len(x)
    m.query.train(), m.key.train()
    return hits / total


@torch.no_grad()
def _features(model: nn.Module, images: torch.Tensor, proto: Protocol, device: torch.device) -> torch.Tensor:
    model.eval()
    out = [
        backbone_features(model, center(images[i : i + proto.probe_batch], proto.image).to(device))
        for i in range(0, len(images), proto.probe_batch)
    ]
    return torch.cat(out) if out else torch.empty(0, feature_dim(model), device=device)


def probe(
    encoder_path: Path,
    encoder_sha256: str,
    data: dict[str, torch.Tensor],
    classes: int,
    *,
    seed: int,
    proto: Protocol,
    device: torch.device,
    scores_path: Path,
) -> dict[str, Any]:
    """Fit the linear probe on frozen, standardised features; write the test-score file.

    ``data`` holds uint8 NCHW ``fit``/``val``/``test`` images and int64 ``*_labels``.
    Returns ``{"epochs", "sha256", "accuracy", "mean_loss"}`` (test accuracy and mean
    cross-entropy read back from the score file's records).
    """
    state = scores.load_encoder(encoder_path, encoder_sha256)
    fc = state["fc.weight"].shape[0]
    model = cifar_resnet18(fc, width=proto.width)
    model.load_state_dict(state)
    model.to(device)
    feats = {k: _features(model, data[k], proto, device) for k in ("fit", "val", "test")}
    # Standardised with the fitting features' statistics (test data select nothing): the
    # pooled features' scale depends on the encoder, and one probe learning rate must suit
    # every encoder (unstandardised, a small CPU encoder's probe diverged).
    mean, std = feats["fit"].mean(0), feats["fit"].std(0, correction=0).clamp_min(1e-6)
    feats = {k: (v - mean) / std for k, v in feats.items()}
    labels = {k: data[f"{k}_labels"].to(device) for k in ("fit", "val", "test")}
    torch.manual_seed(int(seed) + 2)
    linear = nn.Linear(feats["fit"].shape[1], classes).to(device)
    opt = torch.optim.SGD(linear.parameters(), lr=proto.probe_lr, momentum=0.9)
    epochs = []
    for epoch in range(proto.probe_epochs):
        t0, c0 = time.perf_counter(), time.process_time()
        gen = _epoch_gen(seed, epoch, 3)
        losses = []
        order = torch.randperm(len(feats["fit"]), generator=gen)
        for i in range(0, len(order), proto.probe_batch):
            idx = order[i : i + proto.probe_batch].to(device)
            loss = moco.cross_entropy(
                linear(feats["fit"][idx]), labels["fit"][idx]
            )  # nll_loss: no deterministic CUDA kernel
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        with torch.no_grad():
            val = float((linear(feats["val"]).argmax(1) == labels["val"]).float().mean()) if len(feats["val"]) else None
        epochs.append(
            {
                "phase": "probe",
                "epoch": epoch,
                "loss": float(np.mean(losses)),
                "accuracy": val,
                "seconds": time.perf_counter() - t0,
                "cpu_seconds": time.process_time() - c0,
            }
        )
    with torch.no_grad():
        logits = linear(feats["test"])
        losses = -torch.log_softmax(logits, 1).gather(1, labels["test"][:, None])[:, 0]
    sha = scores.write_scores(
        data["test_labels"].numpy(), logits.argmax(1).cpu().numpy(), losses.cpu().numpy(), scores_path
    )
    rec = scores.read_scores(scores_path)
    return {
        "epochs": epochs,
        "sha256": sha,
        "accuracy": float((rec["pred"] == rec["label"]).mean()),
        "mean_loss": float(rec["loss"].astype(np.float64).mean()),
    }
