"""The CIFAR-100 dense-queue application cohort kind (paper §12, Table 9, Figure 3C).

A thin adapter: the protocol lives in the library (``stateaware.app.protocol``: methods,
processes, per-profile knobs, card and budget; ``stateaware.app.cifar_process``: what one
process runs). One process is one (training seed, method) pair — the paper's unit of
observation is a complete encoder process per method — so process ``i`` runs seed ``seeds[i // 7]`` with
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
                     ``stateaware.app.protocol.Protocol`` fields, ``budget_mib`` (absolute) or
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

from pathlib import Path
from typing import Any

from stateaware.app.protocol import process_pairs
from stateaware.kinds import Param, ProcessSpec
from stateaware.records.writer import RecordWriter

#: Checked when the run is planned (stateaware.launch.params); the protocol block of the
#: hardware profile and the archive file are checked by expand().
PARAMS = {
    "archive": Param(str, required=True),
    "seeds": Param(list, item=int, minimum=0, maximum=2**32 - 1, unique=True, required=True),
    "protocols": Param(dict, required=True),
    "verify_checksum": Param(bool),
}

__all__ = ["expand", "run", "summary"]

#: The report section that renders this kind (cohorts/__init__.py, REPORT).
REPORT = ("stateaware.analysis.sections.cifar_application",)


def expand(cohort: dict[str, Any], hardware: dict[str, Any], processes: int) -> list[dict[str, Any]]:
    """One (seed, method) per process, seed-major (``stateaware.app.protocol.process_pairs``)."""
    return process_pairs(cohort.get("params") or {}, hardware, processes, cohort.get("name"))


def run(spec: ProcessSpec, writer: RecordWriter) -> None:
    """One (seed, method) process (``stateaware.app.cifar_process.run_pair``); its files go under
    ``<out>/artifacts/<cohort>/<run id>/seed=<seed>/<method>``."""
    # lazy: it imports torch; the submitting process loads this kind without it
    from stateaware.app.cifar_process import run_pair

    artifacts = (
        Path(spec.out)
        / "artifacts"
        / spec.cohort
        / spec.run_id
        / f"seed={int(spec.params['train_seed'])}"
        / str(spec.params["method"])
    )
    run_pair(spec.params, spec.hardware, writer.write, out=spec.out, artifacts=artifacts)


def summary(out: str, cohort: str) -> str:
    """What the command prints after a run: Table 9 beside the paper's, each seed's quality
    and score-file identity, the joint comparisons and Figure 3C's points, for the latest
    cifar run under ``out`` (``stateaware.analysis.sections.cifar_application.render``)."""
    # lazy: duckdb only for the end-of-run summary; the launcher imports a kind to read its params
    from stateaware.analysis.sections import cifar_application as application
    from stateaware.analysis.store.views import connect

    return application.render(connect(Path(out)))
