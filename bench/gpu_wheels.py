"""The wheels a bare GPU machine lacks: lock them, fetch them, install them offline.

    python bench/gpu_wheels.py lock                       # re-resolve pyproject's ranges, rewrite the lock
    python bench/gpu_wheels.py fetch --python 3.12 --dest .gpu-wheels/cp312
    python bench/gpu_wheels.py fill-cache                 # this interpreter's wheels, for CI's dry run
    python3 bench/gpu_wheels.py install --wheels .gpu-wheels/cp312 --target SITE   # offline, on the GPU

The GPU image has Python 3.12 with torch, torchvision, numpy, pyarrow, scipy, matplotlib and
tqdm, and nothing else the cohorts need. ``lock`` resolves ``NEEDED`` (their ranges read
from pyproject's extras) for each of ``LOCKED_PYTHONS`` on manylinux x86-64 and writes
``bench/gpu-wheels.lock``: a pip requirements file pinning the whole transitive closure, with
the SHA-256 of every wheel it may use (one per Python for compiled ones). A requirement
published only as a source archive (antlr4-python3-runtime 4.9.x) is pinned by the archive's
hash and built into a wheel by ``fetch``.

``fetch`` downloads exactly the locked files (``--require-hashes``) into a cache folder keyed
by the lock's hash (``$STATEAWARE_GPU_WHEELS`` or ``~/.cache/stateaware/gpu-wheels``), so a
second fetch is offline; then copies them to ``--dest``, builds this checkout's own wheel
there (the image has no setuptools) and writes ``lock.txt``: every file's SHA-256 and the
checkout's source hash (``stateaware.source``'s rule).

``install`` runs under the GPU's own interpreter with the standard library alone: it checks
each file against ``lock.txt``, installs them with ``pip --no-index --no-deps --target``,
and checks that the installed stateaware hashes like the checkout it runs from — a wheel
built from other code would otherwise produce records that name a commit they did not run.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "bench" / "gpu-wheels.lock"

#: What the image lacks, as pyproject names them: (extra, distribution).
NEEDED = (
    ("cohorts", "hydra-core"),
    ("cohorts", "omegaconf"),
    ("cohorts", "submitit"),
    ("analysis", "duckdb"),
    ("gpu", "nvidia-ml-py"),
)

#: The Pythons the lock covers: the GPU image's first, then CI's.
LOCKED_PYTHONS = ("3.12", "3.11")

#: torch 2.11's CUDA wheels need glibc 2.28, so the image has it; pip accepts older tags too.
PLATFORM = "manylinux_2_28_x86_64"

#: Published only as a source archive: built into a (pure-Python) wheel by ``fetch``.
SDIST_ONLY = {"antlr4-python3-runtime": "==4.9.*"}

#: Environment variable naming the wheel cache (default ``~/.cache/stateaware/gpu-wheels``).
CACHE_ENV = "STATEAWARE_GPU_WHEELS"

# The checkout's folders as the installed packages name them (pyproject's package-dir).
_PACKAGES = (
    ("stateaware", "stateaware"),
    ("stateaware/cohorts", "cohorts"),
    ("stateaware/analysis", "analysis"),
    ("stateaware/conf", "conf"),
)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pip(python: str = sys.executable) -> list[str]:
    # --isolated: this machine's pip config (extra indexes, global constraints) must not
    # change what resolves or installs; the lock alone decides.
    return [python, "-m", "pip", "--isolated", "--disable-pip-version-check"]


def requirements() -> list[str]:
    """``NEEDED`` with pyproject's ranges, e.g. ``hydra-core>=1.3,<1.4``."""
    with open(REPO / "pyproject.toml", "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    found = []
    for extra, name in NEEDED:
        (spec,) = [r for r in extras[extra] if _norm(re.split(r"[<>=!~\[; ]", r)[0]) == name]
        found.append(spec)
    return found


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _platform_args(python: str) -> list[str]:
    return ["--python-version", python, "--platform", PLATFORM, "--only-binary=:all:"]


def _sdists(folder: Path, pins: dict[str, str] | None = None) -> dict[str, Path]:
    """Download the ``SDIST_ONLY`` archives into ``folder``: name -> archive."""
    out = {}
    for name, spec in SDIST_ONLY.items():
        target = folder / name
        target.mkdir(parents=True, exist_ok=True)
        req = f"{name}{spec}" if pins is None else pins[name]
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(req + "\n")
        extra = [] if pins is None else ["--require-hashes"]
        subprocess.run(
            [*_pip(), "download", "-q", "--no-deps", "--no-binary=:all:", *extra, "-d", str(target), "-r", f.name],
            check=True,
        )
        os.unlink(f.name)
        (out[name],) = target.iterdir()
    return out


def _build(sdist: Path, dest: Path) -> Path:
    """Build a pure-Python wheel from ``sdist`` into ``dest`` (build isolation: needs network once)."""
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run([*_pip(), "wheel", "-q", "--no-deps", "-w", scratch, str(sdist)], check=True)
        (wheel,) = Path(scratch).glob("*.whl")
        if not wheel.name.endswith("-py3-none-any.whl"):
            raise RuntimeError(
                f"{sdist.name} built {wheel.name}, not a pure-Python wheel: it cannot serve another Python"
            )
        return Path(shutil.copy2(wheel, dest / wheel.name))


def _resolve(python: str, built: Path, pins: dict[str, str]) -> dict[str, tuple[str, str]]:
    """pip's resolution for ``python``: name -> (version, sha256 of the chosen file)."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        constraints = Path(scratch) / "constraints.txt"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in pins.items()))
        subprocess.run(
            [*_pip(), "install", "-q", "--dry-run", "--ignore-installed", "--target", str(Path(scratch) / "t")]
            + ["--report", str(report), "--find-links", str(built), "-c", str(constraints)]
            + _platform_args(python)
            + requirements(),
            check=True,
        )
        items = json.loads(report.read_text())["install"]
    return {
        _norm(i["metadata"]["name"]): (i["metadata"]["version"], i["download_info"]["archive_info"]["hashes"]["sha256"])
        for i in items
    }


def lock(path: Path = LOCK) -> str:
    """Resolve ``requirements`` for every ``LOCKED_PYTHONS`` (the later ones held to
    the first one's versions) and write the lock to ``path``; returns its text."""
    hashes: dict[str, set[str]] = {}
    versions: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        sdists = _sdists(Path(scratch) / "sdists")
        built = Path(scratch) / "built"
        built.mkdir()
        for sdist in sdists.values():
            _build(sdist, built)
        for python in LOCKED_PYTHONS:
            for name, (version, digest) in _resolve(python, built, versions).items():
                if versions.setdefault(name, version) != version:
                    raise RuntimeError(f"{name}: {version} for Python {python}, {versions[name]} for the others")
                hashes.setdefault(name, set()).add(digest)
        for name, sdist in sdists.items():
            hashes[name] = {sha256(sdist)}  # the archive's hash: the wheel is ours, built from it
    lines = [
        "# The wheels a bare GPU machine lacks, pinned with their SHA-256 (written by",
        "# `python bench/gpu_wheels.py lock`; bench/gpu_prepare.sh RELOCK=1 runs it).",
        f"# Resolved from pyproject's ranges: {' '.join(requirements())}",
        f"# for CPython {', '.join(LOCKED_PYTHONS)} on {PLATFORM}, wheels only, one --hash per usable file;",
        f"# {', '.join(SDIST_ONLY)}: the source archive's hash (published as an sdist only; built at fetch).",
    ]
    for name in sorted(versions):
        lines.append(f"{name}=={versions[name]} " + " ".join(f"--hash=sha256:{h}" for h in sorted(hashes[name])))
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def locked(path: Path = LOCK) -> dict[str, str]:
    """The lock's requirement lines by distribution name."""
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            out[_norm(line.split("==")[0])] = line.strip()
    return out


def cache_dir(python: str, path: Path = LOCK) -> Path:
    """The cache folder for ``python``'s locked wheels: named by the lock's hash."""
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "stateaware" / "gpu-wheels").expanduser()
    return root / f"cp{python.replace('.', '')}-{sha256(path)[:16]}"


def _cache_complete(cache: Path, pins: dict[str, str]) -> bool:
    if not (cache / "complete").is_file():
        return False
    names = {_norm(p.name.split("-")[0]) for p in cache.glob("*.whl")}
    return names == set(pins)


def fill_cache(python: str, path: Path = LOCK) -> tuple[Path, bool]:
    """Make the cache hold ``python``'s locked wheels; ``(folder, whether it downloaded)``.
    Offline when it is already complete."""
    pins = locked(path)
    cache = cache_dir(python, path)
    if _cache_complete(cache, pins):
        return cache, False
    partial = cache.with_name(cache.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    binary = [line for name, line in pins.items() if name not in SDIST_ONLY]
    req = partial / "requirements.txt"
    req.write_text("\n".join(binary) + "\n")
    subprocess.run(
        [*_pip(), "download", "-q", "--no-deps", "--require-hashes", "-d", str(partial), "-r", str(req)]
        + _platform_args(python),
        check=True,
    )
    req.unlink()
    sdists = _sdists(partial / "sdists", {n: pins[n] for n in SDIST_ONLY})
    for sdist in sdists.values():
        _build(sdist, partial)
    shutil.rmtree(partial / "sdists")
    (partial / "complete").write_text("")
    shutil.rmtree(cache, ignore_errors=True)
    partial.rename(cache)
    return cache, True


def checkout_hash(repo: Path = REPO) -> str:
    """The source hash of the checkout's files, named as an install names them (the rule of
    ``stateaware.source``, loaded from its file: no stateaware import needed)."""
    spec = importlib.util.spec_from_file_location("_stateaware_source", repo / "stateaware" / "source.py")
    assert spec is not None and spec.loader is not None
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    roots = [repo / folder for _, folder in _PACKAGES]
    named: list[tuple[str, Path]] = []
    for prefix, folder in _PACKAGES:
        root = repo / folder
        for path in root.rglob("*"):
            rel = path.relative_to(root)
            if not path.is_file() or path.suffix not in source.SOURCE_SUFFIXES:
                continue
            if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
                continue
            if any(r != root and r in path.parents for r in roots):
                continue
            named.append((f"{prefix}/{rel.as_posix()}", path))
    return str(source.hash_files(named))


def project_wheel(dest: Path, repo: Path = REPO) -> Path:
    """Build this checkout's wheel into ``dest`` from a copy of its sources (no stale
    ``./build``), with the running environment's setuptools (no network)."""
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "source"
        source.mkdir()
        for name in ("pyproject.toml", "setup.py", "README.md"):
            shutil.copy2(repo / name, source / name)
        for _, folder in _PACKAGES:
            shutil.copytree(repo / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", ".*"))
        out = Path(scratch) / "out"
        subprocess.run(
            [*_pip(), "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(source)],
            check=True,
            capture_output=True,
            text=True,
        )
        (wheel,) = out.glob("stateaware-*.whl")
        return Path(shutil.copy2(wheel, dest / wheel.name))


def fetch(python: str, dest: Path, path: Path = LOCK) -> Path:
    """Fill ``dest`` with ``python``'s locked wheels, this checkout's wheel and ``lock.txt``."""
    cache, _ = fill_cache(python, path)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for wheel in sorted(cache.glob("*.whl")):
        shutil.copy2(wheel, dest / wheel.name)
    project_wheel(dest)
    lines = [
        f"# wheels for CPython {python} on {PLATFORM}, from bench/gpu-wheels.lock (sha256 {sha256(path)})",
        f"source_hash {checkout_hash()}",
    ]
    lines += [f"{sha256(w)}  {w.name}" for w in sorted(dest.glob("*.whl"))]
    (dest / "lock.txt").write_text("\n".join(lines) + "\n")
    return dest


def _files(wheels: Path) -> Iterable[tuple[str, str]]:
    for line in (wheels / "lock.txt").read_text().splitlines():
        if line and not line.startswith(("#", "source_hash ")):
            digest, name = line.split("  ", 1)
            yield digest, name


def install(wheels: Path, target: Path, python: str = sys.executable) -> str:
    """Check ``wheels`` against its ``lock.txt``, install them offline into ``target``, and
    check the installed stateaware's source hash against the checkout's; returns the hash."""
    listed = dict((name, digest) for digest, name in _files(wheels))
    present = {p.name for p in wheels.glob("*.whl")}
    if present != set(listed):
        raise SystemExit(f"{wheels}: the wheels there are not those lock.txt lists ({sorted(present ^ set(listed))})")
    bad = [n for n, d in listed.items() if sha256(wheels / n) != d]
    if bad:
        raise SystemExit(f"{wheels}: these wheels do not match lock.txt's SHA-256: {bad}")
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [*_pip(python), "install", "-q", "--no-index", "--no-deps", "--no-compile", "--target", str(target)]
        + [str(wheels / n) for n in sorted(listed)],
        check=True,
    )
    expected = checkout_hash()
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    )
    probe = "import stateaware, stateaware.source as s; print(s.source_hash()); print(stateaware.__file__)"
    done = subprocess.run([python, "-P", "-c", probe], env=env, capture_output=True, text=True, check=True, cwd="/")
    got, where = done.stdout.split()
    if not Path(where).resolve().is_relative_to(target.resolve()):
        raise SystemExit(f"stateaware imports from {where}, not from the installed wheel under {target}")
    if got != expected:
        raise SystemExit(
            f"the installed wheel's source hash {got[:12]} is not the checkout's {expected[:12]}: "
            "the wheel was built from other code; run bench/gpu_prepare.sh again"
        )
    return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("lock", help="re-resolve pyproject's ranges and rewrite bench/gpu-wheels.lock")
    fetch_p = sub.add_parser("fetch", help="the locked wheels, this checkout's wheel and lock.txt into --dest")
    fetch_p.add_argument("--python", default=LOCKED_PYTHONS[0], help="CPython version (default: the GPU image's)")
    fetch_p.add_argument("--dest", type=Path, required=True)
    fill_p = sub.add_parser("fill-cache", help="cache the locked wheels (default: for this interpreter)")
    fill_p.add_argument("--python", default=f"{sys.version_info[0]}.{sys.version_info[1]}")
    install_p = sub.add_parser("install", help="offline: check, install into --target, check the source hash")
    install_p.add_argument("--wheels", type=Path, required=True)
    install_p.add_argument("--target", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "lock":
        print(lock(), end="")
    elif args.command == "fetch":
        dest = fetch(args.python, args.dest)
        size = sum(p.stat().st_size for p in dest.iterdir())
        print(f"{dest}: {len(list(dest.glob('*.whl')))} wheels, {size / 2**20:.1f} MiB")
    elif args.command == "fill-cache":
        cache, fetched = fill_cache(args.python)
        print(f"GPU wheel cache {cache}: {'filled' if fetched else 'already full'}")
    else:
        digest = install(args.wheels, args.target)
        print(f"installed {args.wheels} into {args.target}; source hash {digest[:12]} (the checkout's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
