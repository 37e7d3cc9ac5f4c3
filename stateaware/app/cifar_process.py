"""One CIFAR process: one (training seed, method) pair, from the archive to the score file.

What one process of the CIFAR cohort executes (paper §12), as a library function: it
takes the process's params, the hardware profile, where artifacts go and a
``write(table, rows, part=...)`` callable (a ``RecordWriter.write``), so it knows nothing
of cohorts, configs or launchers. It loads the archive, fixes the split, obtains the card
(frozen, or profiled here before the clock starts), plans the ``agnostic`` and ``joint``
policies under the selection budget, trains the encoder (observed: peaks, complete-encoder
time), writes the canonical encoder file, runs the probe bound to that file's hash and
writes the canonical test-score file. A planned method with no feasible policy under the
budget writes its ``policies`` row (``feasible`` false) and nothing else.

Complete-encoder time (``records.encoder_seconds``) spans reading the archive, the card and
plan, building the encoders, every encoder epoch with its validation, the observer's
counter reads, and the encoder checkpoint; the probe is separate (paper §12).
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from stateaware.app import data, moco, train
from stateaware.app import encoder_card as app_card
from stateaware.app.protocol import (
    budget_bytes,
    check_card_shape,
    protocol_from,
    protocol_of,
    split_sizes,
    workload_columns,
)
from stateaware.cost_runtime.frozen_cards import load_frozen
from stateaware.cost_runtime.plans import fixed_plan
from stateaware.cost_runtime.plans import plan as plan_of
from stateaware.planner.records import policy_row, profile_rows

__all__ = ["run_pair"]

#: ``write(table, rows, part=...)``: how a process hands its rows to the record store.
Write = Callable[..., Any]


def run_pair(
    params: dict[str, Any], hardware: dict[str, Any], write: Write, *, out: str | Path, artifacts: str | Path
) -> None:
    """Run the process ``params`` (``train_seed``, ``method``, ``archive`` and the cohort's
    params) on ``hardware``, with deterministic algorithms (restored afterwards); files go
    under ``artifacts`` (inside ``out``, whose relative paths the ``artifacts`` rows record)."""
    proto_cfg = protocol_of(params, hardware)
    with train.deterministic(proto_cfg.get("threads")):
        _run_pair(params, proto_cfg, hardware, write, out=Path(out), artifacts=Path(artifacts))


def _images(array):
    return torch.from_numpy(array).permute(0, 3, 1, 2).contiguous()


def _take(n: int | None, total: int) -> int:
    return total if n is None else min(int(n), total)


def _run_pair(
    params: dict[str, Any],
    proto_cfg: dict[str, Any],
    hardware: dict[str, Any],
    write: Write,
    *,
    out: Path,
    artifacts: Path,
) -> None:
    method, seed = str(params["method"]), int(params["train_seed"])
    if method not in moco.METHODS:
        raise ValueError(f"params.method={method!r}; valid methods are: {', '.join(moco.METHODS)}")
    hardware_name = str(hardware.get("name", "cpu"))
    proto = protocol_from(proto_cfg)
    device = torch.device(str(hardware.get("device", "cpu")))
    verify = bool(proto_cfg.get("verify_checksum", params.get("verify_checksum", True)))
    observed = seed not in {int(s) for s in proto_cfg.get("quality_only_seeds") or ()}

    # A card profiled here is not the encoder process (the paper's card is frozen before the
    # cohort): it runs before the clock starts, and its cached blocks and peaks are dropped.
    frozen = bool(proto_cfg.get("card"))
    card_source = "frozen" if frozen else "measured_in_process"
    card = (
        None
        if frozen
        else app_card.profile_protocol(
            proto,
            seed=seed,
            device=device,
            provenance={"hardware": hardware_name, "scale": float(hardware.get("scale", 1.0)), "seed": seed},
        )
    )
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)

    # The complete encoder process starts here: data, card and plan, encoders, every epoch
    # with its validation, the checkpoint (paper §12); the probe is timed apart.
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cifar-") as tmp:
        cifar = data.load(Path(str(params["archive"])).expanduser(), extract_to=tmp, verify_checksum=verify)
    n_train = len(cifar.train_labels)
    fit_n, val_n = split_sizes(proto_cfg.get("fit"), proto_cfg.get("validation"), n_train)
    fit, val = data.split(n_train, fit_n, val_n, seed=int(proto_cfg.get("split_seed", 0)))
    test_n = _take(proto_cfg.get("test"), len(cifar.test_labels))
    images = _images(cifar.train_images)
    test_images = _images(cifar.test_images[:test_n])
    base = {"method": method, "seed": seed, "checksum_verified": cifar.checksum_verified}
    if frozen:
        card = check_card_shape(load_frozen(str(proto_cfg["card"])), proto, hardware_name)

    budget = budget_bytes(proto_cfg, card)
    columns = workload_columns(proto, budget, hardware_name, moco.n_segments())
    part = f"seed={seed}-method={method}"
    if method in moco.PLANNED:
        plan = plan_of(card, budget, moco.PLANNED[method])
        if not plan["feasible"]:
            # Outcomes are data: the infeasible plan is recorded and never executed.
            write("policies", [policy_row(plan, method, seed=seed, **columns)], part=part)
            return
        policy = tuple(plan["policy"])
    else:
        policy = moco.fixed_policy(method)
        # functional's out-of-place queue is no per-segment option: recorded without a policy
        # or prediction, as the cost runtime records it (its encoder segments run whole;
        # detail says so).
        plan = fixed_plan(card, None if method == "functional" else policy)

    # The complete encoder process (observed unless the seed is quality-only), then the probe.
    observer = train.Observer(device, lambda: 0) if observed else None
    enc = train.train_encoder(
        images[fit],
        images[val],
        seed=seed,
        method=method,
        policy=policy,
        proto=proto,
        device=device,
        out=artifacts,
        observer=observer,
    )
    encoder_seconds = time.perf_counter() - start
    labels = torch.from_numpy(cifar.train_labels)
    probe = train.probe(
        enc["path"],
        enc["sha256"],
        {
            "fit": images[fit],
            "val": images[val],
            "test": test_images,
            "fit_labels": labels[fit],
            "val_labels": labels[val],
            "test_labels": torch.from_numpy(cifar.test_labels[:test_n]),
        },
        cifar.classes,
        seed=seed,
        proto=proto,
        device=device,
        scores_path=artifacts / "scores.bin",
    )

    write("policies", [policy_row(plan, method, seed=seed, **columns)], part=part)
    write("profiles", profile_rows(card, **columns), part=part)
    write(
        "epochs",
        [
            {**base, "peak_allocated_bytes": None, "peak_reserved_bytes": None, "peak_source": None, **row}
            for row in enc["epochs"] + probe["epochs"]
        ],
        part=part,
    )
    if observer is not None:
        write("peaks", [{**base, **row} for row in observer.rows], part=part)
    write(
        "artifacts",
        [
            {**base, "name": name, "path": str(path.relative_to(out)), "bytes": path.stat().st_size, "sha256": sha}
            for name, path, sha in (
                ("encoder", enc["path"], enc["sha256"]),
                ("test_scores", artifacts / "scores.bin", probe["sha256"]),
            )
        ],
        part=part,
    )
    write(
        "records",
        [
            {
                **base,
                "backend": "torch",
                "family": "cifar",
                "precision": "fp32",
                "workload": "cifar",
                "check_name": "test_scores",
                "sha256": probe["sha256"],
                "encoder_sha256": enc["sha256"],
                "encoder_seconds": encoder_seconds,
                "observed": observed,
                "card_source": card_source,
                "test_accuracy": probe["accuracy"],
                "test_mean_loss": probe["mean_loss"],
                "detail": json.dumps(
                    {
                        "policy": list(policy),
                        "card_digest": card.digest,
                        "test_images": test_n,
                        "fit": fit_n,
                        "validation": val_n,
                        "archive_sha256": cifar.archive_sha256,
                        "queue_sha256": enc["queue_sha256"],
                        "protocol": dataclasses.asdict(proto),
                    },
                    sort_keys=True,
                ),
            }
        ],
        part=part,
    )
