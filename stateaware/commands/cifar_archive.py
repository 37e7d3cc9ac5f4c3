"""``python -m stateaware.app.data PATH``: write a generated CIFAR-100-format archive.

The archive itself is ``stateaware.app.data.write_archive``; this is its command line.
"""

from __future__ import annotations

import argparse

from stateaware.app.data import write_archive

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """``python -m stateaware.app.data PATH [--train N] [--test N]``: write a generated archive."""

    parser = argparse.ArgumentParser(
        prog="python -m stateaware.app.data",
        description="Write a small CIFAR-100-format archive (random images whose mean "
        "brightness depends on the class) for CPU runs and tests; it does "
        "not match the official checksum.",
    )
    parser.add_argument("path")
    parser.add_argument(
        "--train", type=int, default=2048, help="training images (the CPU protocol fits 1,024 and validates on 256)"
    )
    parser.add_argument("--test", type=int, default=512, help="test images (the CPU protocol scores 512)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(write_archive(args.path, train=args.train, test=args.test, seed=args.seed))
    return 0
