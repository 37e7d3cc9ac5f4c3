"""The CIFAR-100 dense-queue application cohort kind (paper §12, Table 9, Figure 3C).

One process is one (training seed, method) pair — the paper's unit of observation is a
complete encoder process per method — so process ``i`` runs seed ``seeds[i // 7]`` with
method ``METHODS[i % 7]`` (``expand``). It loads the archive, fixes the split, profiles
the encoder's segments into a card (``stateaware.app.card``), plans the ``agnostic`` and
``joint`` policies under the selection budget, trains the encoder (observed: peaks,
complete-encoder time), writes the canonical encoder file, runs the probe bound to that
file's hash and writes the canonical test-score file.

Cohort ``params`` (``conf/cohort/cifar.yaml``):

``archive``          path of ``cifar-100-python.tar.gz`` (relative paths: to the working
                     directory). ``verify_checksum`` (per protocol, default true) checks
                     torchvision's MD5s; every row records it (``checksum_verified``).
``seeds``            training seeds; the process count must be ``7 * len(seeds)``.
``protocols``        per hardware profile name (``h100``, ``cpu``): ``fit``, ``validation``,
                     ``test`` image counts (null: all), ``split_seed``, ``seeds`` (how many of
                     ``params.seeds`` the profile runs), the
                     ``stateaware.app.train.Protocol`` fields, ``budget_mib`` (absolute) or
                     ``budget_position`` (relative between the card's anchors,
                     ``stateaware.costrt.plans.budget_at``), ``threads``, ``peaks``
                     (``step`` or ``epoch`` resets) and ``card``: the digest of a card frozen
                     with ``python -m stateaware.app.card`` (absent: profiled in the process,
                     so planned policies may differ between processes by measured time).

Tables: ``policies`` and ``profiles`` (the card and the plan of this process's method),
``epochs`` (encoder and probe), ``peaks``, ``artifacts`` (encoder and score files, with
SHA-256), ``records`` (one row: test-score hash, accuracy, mean loss, encoder seconds).
A planned method with no feasible policy under the budget writes its ``policies`` row
(``feasible`` false) and nothing else: it is never executed.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from stateaware.launch.spec import ProcessSpec
from stateaware.records.writer import RecordWriter

__all__ = ["expand", "run", "protocol_of"]

_METHODS = ("eager", "whole", "regions", "functional", "deferred", "agnostic", "joint")  # app.moco.METHODS
_MIB = 1 << 20


def protocol_of(params: dict[str, Any], hardware: dict[str, Any]) -> dict[str, Any]:
    """The protocol block for ``hardware``'s profile name; ``ValueError`` listing the valid ones."""
    protocols = params.get("protocols") or {}
    name = str(hardware.get("name", "cpu"))
    if name not in protocols:
        raise ValueError(f"cohort params.protocols has no entry for hardware {name!r}; valid entries are: "
                         f"{', '.join(protocols) or '(none)'}")
    return dict(protocols[name])


def expand(cohort: dict[str, Any], hardware: dict[str, Any], processes: int) -> list[dict[str, Any]]:
    """One (seed, method) per process: ``processes`` must be ``7 * len(seeds)``."""
    params = cohort.get("params") or {}
    seeds = [int(s) for s in params.get("seeds") or []]
    proto = protocol_of(params, hardware)
    seeds = seeds[: int(proto.get("seeds", len(seeds)))]
    if processes % len(_METHODS) or processes // len(_METHODS) > len(seeds) or processes < 1:
        raise ValueError(f"cohort {cohort.get('name')!r}: processes={processes} must be 7 x the number of seeds "
                         f"run (at most {len(seeds)} seeds on {hardware.get('name')!r}: {seeds})")
    return [{"train_seed": seeds[i // len(_METHODS)], "method": _METHODS[i % len(_METHODS)]} for i in range(processes)]


def _images(array):
    import torch

    return torch.from_numpy(array).permute(0, 3, 1, 2).contiguous()


def _take(n: int | None, total: int) -> int:
    return total if n is None else min(int(n), total)


def run(spec: ProcessSpec, writer: RecordWriter) -> None:
    import torch

    from stateaware.app import card as app_card
    from stateaware.app import data, moco, train
    from stateaware.costrt.plans import budget_at

    params = spec.params
    method, seed = str(params["method"]), int(params["train_seed"])
    if method not in moco.METHODS:
        raise ValueError(f"params.method={method!r}; valid methods are: {', '.join(moco.METHODS)}")
    proto_cfg = protocol_of(params, spec.hardware)
    fields = {f.name for f in dataclasses.fields(train.Protocol)}
    proto = train.Protocol(**{k: v for k, v in proto_cfg.items() if k in fields})
    train.deterministic(proto_cfg.get("threads"))
    device = torch.device(str(spec.hardware.get("device", "cpu")))
    verify = bool(proto_cfg.get("verify_checksum", params.get("verify_checksum", True)))
    out = Path(spec.out)
    artifacts = out / "artifacts" / spec.cohort / spec.run_id / f"seed={seed}" / method
    with tempfile.TemporaryDirectory(prefix="cifar-") as tmp:
        cifar = data.load(Path(str(params["archive"])).expanduser(), extract_to=tmp, verify_checksum=verify)
    n_train = len(cifar.train_labels)
    fit_n = _take(proto_cfg.get("fit"), n_train)
    val_n = _take(proto_cfg.get("validation"), n_train - fit_n)
    fit, val = data.split(n_train, fit_n, val_n, seed=int(proto_cfg.get("split_seed", 0)))
    test_n = _take(proto_cfg.get("test"), len(cifar.test_labels))
    images = _images(cifar.train_images)
    test_images = _images(cifar.test_images[:test_n])
    flag = {"checksum_verified": cifar.checksum_verified}

    # The card (frozen by digest, or measured here) and the plan (every method records its row).
    if proto_cfg.get("card"):
        from stateaware.costrt.cards import load_frozen

        card, card_source = load_frozen(str(proto_cfg["card"])), "frozen"
    else:
        card = app_card.profile_protocol(proto, seed=seed, device=device,
                                         provenance={"hardware": spec.hardware_name, "seed": seed})
        card_source = "measured_in_process"
    if "budget_mib" in proto_cfg:
        budget = int(float(proto_cfg["budget_mib"]) * _MIB)
    else:
        budget = budget_at(card, float(proto_cfg["budget_position"]))
    columns = {"workload": "cifar", "cell": spec.hardware_name, "buffer_bytes": proto.queue_size * proto.dim * 4,
               "write_fraction": proto.batch / proto.queue_size, "live_segments": moco.n_segments(),
               "granularity_bytes": proto.dim * 4, "width": proto.width, "batch": proto.batch,
               "budget_bytes": int(budget)}
    part = f"seed={seed}-method={method}"
    if method in moco.PLANNED:
        plan = app_card.plan_policies(card, budget)[method]
        if not plan["feasible"]:
            # Outcomes are data: the infeasible plan is recorded and never executed.
            writer.write("policies", [{"method": method, **plan, **columns}], part=part)
            return
        policy = tuple(plan["policy"])
    else:
        from stateaware.costrt.plans import predict

        policy = moco.fixed_policy(method)
        # functional keeps queue versions out of place: not a card option, so no prediction.
        peak, ms = (None, None) if method == "functional" else predict(card, policy)
        # functional's out-of-place queue is no per-segment option: recorded without a policy,
        # as the cost runtime records it (its encoder segments run whole; detail says so).
        plan = {"planner": None, "feasible": True, "policy": None if method == "functional" else list(policy),
                "predicted_peak_bytes": peak, "predicted_ms": ms, "card_digest": card.digest}
    writer.write("policies", [{"method": method, **plan, **columns}], part=part)
    writer.write("profiles", [{"card_digest": card.digest, "segment": i, "option": option,
                               **{k: v for k, v in cost.to_dict().items()},
                               "persistent_bytes": card.persistent_bytes,
                               "provenance_json": json.dumps(dict(card.provenance), sort_keys=True), **columns}
                              for i, seg in enumerate(card.segments) for option, cost in seg.items()], part=part)

    # The complete encoder process (observed), then the probe (separate).
    observer = train.Observer(device, lambda: 0)
    if device.type == "cuda":
        # The card's profiling forwards are not the encoder process: drop their cached
        # blocks and peaks so the first observation starts from this process's baseline.
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    enc = train.train_encoder(images[fit], images[val], seed=seed, method=method, policy=policy, proto=proto,
                              device=device, out=artifacts, observer=observer)
    encoder_seconds = time.perf_counter() - start
    labels = torch.from_numpy(cifar.train_labels)
    probe = train.probe(enc["path"], enc["sha256"],
                        {"fit": images[fit], "val": images[val], "test": test_images, "fit_labels": labels[fit],
                         "val_labels": labels[val], "test_labels": torch.from_numpy(cifar.test_labels[:test_n])},
                        cifar.classes, seed=seed, proto=proto, device=device, scores_path=artifacts / "scores.bin")

    base = {"method": method, "seed": seed, **flag}
    writer.write("epochs", [{**base, "peak_allocated_bytes": None, "peak_reserved_bytes": None, "peak_source": None,
                             **row} for row in enc["epochs"] + probe["epochs"]], part=part)
    writer.write("peaks", [{**base, **row} for row in observer.rows], part=part)
    writer.write("artifacts", [{**base, "name": name, "path": str(path.relative_to(out)),
                                "bytes": path.stat().st_size, "sha256": sha}
                               for name, path, sha in (("encoder", enc["path"], enc["sha256"]),
                                                       ("test_scores", artifacts / "scores.bin", probe["sha256"]))],
                 part=part)
    writer.write("records", [{**base, "backend": "torch", "family": "cifar", "precision": "fp32",
                              "workload": "cifar", "check": "test_scores", "sha256": probe["sha256"],
                              "encoder_sha256": enc["sha256"], "encoder_seconds": encoder_seconds,
                              "test_accuracy": probe["accuracy"], "test_mean_loss": probe["mean_loss"],
                              "detail": json.dumps({"policy": list(policy), "card_source": card_source,
                                                    "card_digest": card.digest, "test_images": test_n, "fit": fit_n,
                                                    "validation": val_n, "archive_sha256": cifar.archive_sha256,
                                                    "queue_sha256": enc["queue_sha256"],
                                                    "protocol": dataclasses.asdict(proto)}, sort_keys=True)}],
                 part=part)
