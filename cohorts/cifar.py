"""The CIFAR-100 dense-queue application cohort kind (paper §12, Table 9, Figure 3C).

One process is one (training seed, method) pair — the paper's unit of observation is a
complete encoder process per method — so process ``i`` runs seed ``seeds[i // 7]`` with
method ``METHODS[i % 7]`` (``expand``). It loads the archive, fixes the split, profiles
the encoder's segments into a card (``stateaware.app.encoder_card``), plans the ``agnostic`` and
``joint`` policies under the selection budget, trains the encoder (observed: peaks,
complete-encoder time), writes the canonical encoder file, runs the probe bound to that
file's hash and writes the canonical test-score file.

Cohort ``params`` (``conf/cohort/cifar.yaml``):

``archive``          path of ``cifar-100-python.tar.gz`` (relative paths: to the working
                     directory). ``verify_checksum`` (per protocol, default true) checks
                     torchvision's MD5s; every row records it (``checksum_verified``).
``seeds``            training seeds; ``processes = 7 * k`` runs the first ``k``.
``protocols``        per hardware profile name (``h100``, ``cpu``): ``processes`` (the
                     cohort's default count on that profile), ``fit``, ``validation``,
                     ``test`` image counts (null: all), ``split_seed``, the
                     ``stateaware.app.train.Protocol`` fields, ``budget_mib`` (absolute) or
                     ``budget_position`` (relative between the card's anchors,
                     ``stateaware.cost_runtime.plans.budget_at``), ``threads``, ``peaks``
                     (``step`` or ``epoch`` resets), ``quality_only_seeds`` (seeds that
                     run unobserved: no allocator reads, quality evidence only — the
                     paper's 2701) and ``card``: the digest of a card frozen with
                     ``python -m stateaware.app.encoder_card --hardware NAME`` at the protocol's
                     shapes (checked). Without one each process profiles its own card
                     before its clock starts, so planned policies may differ between
                     processes by measured time (``records.card_source`` says which).

Complete-encoder time (``records.encoder_seconds``) spans reading the archive, the card and
plan, building the encoders, every encoder epoch with its validation, the observer's
counter reads, and the encoder checkpoint; the probe is separate (paper §12).

Tables: ``policies`` and ``profiles`` (the card and the plan of this process's method),
``epochs`` (encoder and probe), ``peaks`` (observed seeds), ``artifacts`` (encoder and
score files, with SHA-256), ``records`` (one row: test-score hash, accuracy, mean loss,
encoder seconds, ``observed``, ``card_source``).
A planned method with no feasible policy under the budget writes its ``policies`` row
(``feasible`` false) and nothing else: it is never executed.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from stateaware.launch.spec import ProcessSpec
from stateaware.launch.params import Param
from stateaware.records.writer import RecordWriter

#: Checked when the run is planned (stateaware.launch.params); the protocol block of the
#: hardware profile and the archive file are checked by expand().
PARAMS = {
    "archive": Param(str, required=True),
    "seeds": Param(list, item=int, minimum=0, required=True),
    "protocols": Param(dict, required=True),
    "verify_checksum": Param(bool),
}

__all__ = ["expand", "run", "summary", "protocol_of", "split_sizes"]

#: The report section that renders this kind (cohorts/__init__.py, REPORT).
REPORT = ("stateaware.analysis.application",)

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
    """One (seed, method) per process, seed-major: ``processes`` must be ``7 * k`` with
    ``k <= len(params.seeds)``; the first ``k`` seeds run. ``params.archive`` must name a
    file (checked here, so a missing archive fails before any process starts); each
    process gets its absolute path."""
    params = cohort.get("params") or {}
    seeds = [int(s) for s in params.get("seeds") or []]
    protocol_of(params, hardware)  # fail here, before any process starts, on an unknown profile
    if processes % len(_METHODS) or processes // len(_METHODS) > len(seeds) or processes < 1:
        raise ValueError(f"cohort {cohort.get('name')!r}: processes={processes} must be 7 x the number of seeds "
                         f"run (at most {len(seeds)} seeds: {seeds})")
    archive = Path(str(params.get("archive"))).expanduser().resolve()
    if not archive.is_file():
        raise ValueError(f"cohort.params.archive={params.get('archive')}: no file at {archive}; put the official "
                         "cifar-100-python.tar.gz there (runs never download it) or, for a CPU run, write a "
                         f"generated one: python -m stateaware.app.data {archive}")
    # Every process reads the same file, whatever directory it starts in.
    return [{"train_seed": seeds[i // len(_METHODS)], "method": _METHODS[i % len(_METHODS)], "archive": str(archive)}
            for i in range(processes)]


def _images(array):
    import torch

    return torch.from_numpy(array).permute(0, 3, 1, 2).contiguous()


def _take(n: int | None, total: int) -> int:
    return total if n is None else min(int(n), total)


def split_sizes(fit: int | None, validation: int | None, n_train: int) -> tuple[int, int]:
    """The fitting and validation counts for an archive of ``n_train`` training images.

    ``None`` means all the remaining images. When the archive holds fewer images than the
    protocol asks for (a small generated archive), both shrink in the protocol's ratio —
    say so on stderr — rather than one of them silently vanishing.
    """
    fit_n = n_train if fit is None else int(fit)
    val_n = n_train - min(fit_n, n_train) if validation is None else int(validation)
    if fit_n + val_n <= n_train:
        return fit_n, val_n
    scaled = max(1, fit_n * n_train // (fit_n + val_n))
    print(f"cifar: the archive has {n_train} training images, fewer than fit={fit_n} + validation={val_n}: "
          f"using {scaled} + {n_train - scaled} in the same ratio", file=sys.stderr)
    return scaled, n_train - scaled


#: Protocol fields that fix a card's costs: a frozen card must have been profiled at these.
_CARD_SHAPE = ("image", "width", "dim", "queue_size", "batch")


def _frozen_card(digest: str, proto: Any, hardware: str) -> Any:
    """The frozen card ``digest``, refused when it was profiled at other shapes than
    ``proto``'s: its costs would describe another program."""
    from stateaware.cost_runtime.frozen_cards import load_frozen

    card = load_frozen(digest)
    profiled = dict(card.provenance).get("protocol") or {}
    wrong = {k: (profiled.get(k), getattr(proto, k)) for k in _CARD_SHAPE if profiled.get(k) != getattr(proto, k)}
    if wrong:
        raise ValueError(f"frozen card {card.digest[:12]} (params.protocols.{hardware}.card) was profiled at "
                         + ", ".join(f"{k}={a}" for k, (a, _) in wrong.items()) + "; the protocol has "
                         + ", ".join(f"{k}={b}" for k, (_, b) in wrong.items())
                         + f": freeze a card for it with `python -m stateaware.app.encoder_card --hardware {hardware}`")
    return card


def run(spec: ProcessSpec, writer: RecordWriter) -> None:
    """One (seed, method) process, with deterministic algorithms (restored afterwards)."""
    from stateaware.app import train

    with train.deterministic(protocol_of(spec.params, spec.hardware).get("threads")):
        _run(spec, writer)


def _run(spec: ProcessSpec, writer: RecordWriter) -> None:
    import torch

    from stateaware.app import encoder_card as app_card
    from stateaware.app import data, moco, train
    from stateaware.cost_runtime.plans import budget_at

    params = spec.params
    method, seed = str(params["method"]), int(params["train_seed"])
    if method not in moco.METHODS:
        raise ValueError(f"params.method={method!r}; valid methods are: {', '.join(moco.METHODS)}")
    proto_cfg = protocol_of(params, spec.hardware)
    fields = {f.name for f in dataclasses.fields(train.Protocol)}
    proto = train.Protocol(**{k: v for k, v in proto_cfg.items() if k in fields})
    device = torch.device(str(spec.hardware.get("device", "cpu")))
    verify = bool(proto_cfg.get("verify_checksum", params.get("verify_checksum", True)))
    observed = seed not in {int(s) for s in proto_cfg.get("quality_only_seeds") or ()}
    out = Path(spec.out)
    artifacts = out / "artifacts" / spec.cohort / spec.run_id / f"seed={seed}" / method

    # A card profiled here is not the encoder process (the paper's card is frozen before the
    # cohort): it runs before the clock starts, and its cached blocks and peaks are dropped.
    frozen = bool(proto_cfg.get("card"))
    card_source = "frozen" if frozen else "measured_in_process"
    card = None if frozen else app_card.profile_protocol(
        proto, seed=seed, device=device, provenance={"hardware": spec.hardware_name, "scale": spec.scale, "seed": seed})
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
        card = _frozen_card(str(proto_cfg["card"]), proto, spec.hardware_name)

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
            writer.write("policies", [{"method": method, "seed": seed, **plan, **columns}], part=part)
            return
        policy = tuple(plan["policy"])
    else:
        from stateaware.cost_runtime.plans import predict

        policy = moco.fixed_policy(method)
        # functional keeps queue versions out of place: not a card option, so no prediction.
        peak, ms = (None, None) if method == "functional" else predict(card, policy)
        # functional's out-of-place queue is no per-segment option: recorded without a policy,
        # as the cost runtime records it (its encoder segments run whole; detail says so).
        plan = {"planner": None, "feasible": True, "policy": None if method == "functional" else list(policy),
                "predicted_peak_bytes": peak, "predicted_ms": ms, "card_digest": card.digest}

    # The complete encoder process (observed unless the seed is quality-only), then the probe.
    observer = train.Observer(device, lambda: 0) if observed else None
    enc = train.train_encoder(images[fit], images[val], seed=seed, method=method, policy=policy, proto=proto,
                              device=device, out=artifacts, observer=observer)
    encoder_seconds = time.perf_counter() - start
    labels = torch.from_numpy(cifar.train_labels)
    probe = train.probe(enc["path"], enc["sha256"],
                        {"fit": images[fit], "val": images[val], "test": test_images, "fit_labels": labels[fit],
                         "val_labels": labels[val], "test_labels": torch.from_numpy(cifar.test_labels[:test_n])},
                        cifar.classes, seed=seed, proto=proto, device=device, scores_path=artifacts / "scores.bin")

    writer.write("policies", [{"method": method, "seed": seed, **plan, **columns}], part=part)
    writer.write("profiles", [{"card_digest": card.digest, "segment": i, "option": option,
                               **cost.to_dict(),
                               "persistent_bytes": card.persistent_bytes,
                               "provenance_json": json.dumps(dict(card.provenance), sort_keys=True), **columns}
                              for i, seg in enumerate(card.segments) for option, cost in seg.items()], part=part)
    writer.write("epochs", [{**base, "peak_allocated_bytes": None, "peak_reserved_bytes": None, "peak_source": None,
                             **row} for row in enc["epochs"] + probe["epochs"]], part=part)
    if observer is not None:
        writer.write("peaks", [{**base, **row} for row in observer.rows], part=part)
    writer.write("artifacts", [{**base, "name": name, "path": str(path.relative_to(out)),
                                "bytes": path.stat().st_size, "sha256": sha}
                               for name, path, sha in (("encoder", enc["path"], enc["sha256"]),
                                                       ("test_scores", artifacts / "scores.bin", probe["sha256"]))],
                 part=part)
    writer.write("records", [{**base, "backend": "torch", "family": "cifar", "precision": "fp32",
                              "workload": "cifar", "check_name": "test_scores", "sha256": probe["sha256"],
                              "encoder_sha256": enc["sha256"], "encoder_seconds": encoder_seconds,
                              "observed": observed, "card_source": card_source,
                              "test_accuracy": probe["accuracy"], "test_mean_loss": probe["mean_loss"],
                              "detail": json.dumps({"policy": list(policy), "card_digest": card.digest,
                                                    "test_images": test_n, "fit": fit_n,
                                                    "validation": val_n, "archive_sha256": cifar.archive_sha256,
                                                    "queue_sha256": enc["queue_sha256"],
                                                    "protocol": dataclasses.asdict(proto)}, sort_keys=True)}],
                 part=part)


def summary(out: str, cohort: str) -> str:
    """What the command prints after a run: Table 9 beside the paper's, each seed's quality
    and score-file identity, the joint comparisons and Figure 3C's points, for the latest
    cifar run under ``out`` (``stateaware.analysis.application.render``)."""
    from stateaware.analysis import application
    from stateaware.analysis.views import connect

    return application.render(connect(Path(out)))
