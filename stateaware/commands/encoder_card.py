"""``python -m stateaware.app.encoder_card --hardware cpu``: profile the cifar protocol and freeze its card.

The card is ``stateaware.app.encoder_card.profile_protocol``'s; this command reads the
cohort and hardware files (``stateaware.config``) and freezes what it measures.
"""

from __future__ import annotations

import argparse
import dataclasses

from stateaware.app.encoder_card import profile_protocol
from stateaware.app.protocol import protocol_from, protocol_of
from stateaware.app.train import deterministic
from stateaware.config import ConfigError, conf_file, hardware_file
from stateaware.cost_runtime.frozen_cards import freeze

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """``python -m stateaware.app.encoder_card --hardware cpu``: profile the cifar cohort's protocol
    for that hardware profile and freeze the card (``stateaware.cost_runtime.frozen_cards.freeze``);
    prints the digest to put under ``params.protocols.<hardware>.card``. The cohort and hardware
    files are read from ``--conf`` (default: the packaged ``conf/``) by ``stateaware.config``."""

    parser = argparse.ArgumentParser(
        prog="python -m stateaware.app.encoder_card",
        description="Profile the cifar cohort's protocol for a hardware profile and freeze its card.",
    )
    parser.add_argument("--hardware", default="cpu", help="hardware profile (a key of the cohort's protocols)")
    parser.add_argument("--cohort", default="cifar", help="the cohort whose protocols to read (default: cifar)")
    parser.add_argument(
        "--conf",
        default=None,
        metavar="DIR",
        help="config folder holding cohort/ and hardware/ (default: the packaged conf/)",
    )
    parser.add_argument("--device", default=None, help="device (default: the hardware profile's)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--directory", default=None, help="where to freeze (default: conf/cards)")
    args = parser.parse_args(argv)
    try:
        # Only the params: the cohort's ``processes`` interpolates the composed config's hardware.
        params = conf_file("cohort", args.cohort, "params", conf_dir=args.conf)
        hardware = hardware_file(args.hardware, args.cohort, conf_dir=args.conf)
        proto_cfg = protocol_of(params, {"name": args.hardware})
    except (ConfigError, ValueError) as exc:
        parser.error(str(exc))
    proto = protocol_from(proto_cfg)
    with deterministic(proto_cfg.get("threads")):  # the settings the cohort's processes time under
        card = profile_protocol(
            proto,
            seed=0,
            device=args.device or hardware.get("device", "cpu"),
            repeats=args.repeats,
            provenance={
                "hardware": args.hardware,
                "scale": float(hardware.get("scale", 1.0)),
                "protocol": dataclasses.asdict(proto),
            },
        )
    path, digest = freeze(card.to_dict(), f"cifar-{args.hardware}", args.directory)
    print(f"cifar-{args.hardware}: {digest}  ({path})")
    return 0
