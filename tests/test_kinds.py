"""The kind contract's leaf (``stateaware.kinds``): the process spec keeps the name pickles carry,
an older revision's worker reads a spec made here, and the shipped kinds and report sections meet
the protocols."""

from __future__ import annotations

import importlib
import pickle
import pickletools
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import cloudpickle
import pytest

import stateaware.launch.launcher  # noqa: F401  (the submitting process: as submitit pickles there)
from stateaware.kinds import Kind, ProcessSpec, ReportSection, load_kind, report_sections
from stateaware.launch import pair

REPO = Path(__file__).resolve().parent.parent
SPEC = ProcessSpec("r1", "demo", "demo", 2, 4, 7, "abc", "/results", "local", False, {"name": "cpu"}, {"size": 8})


def _globals(data: bytes) -> list[str]:
    """The ``module name`` pairs of ours a pickle looks up (GLOBAL, or the two strings before
    STACK_GLOBAL); the standard library's (``copy_reg``, in protocols 0 and 1) left out."""
    found, strings = [], []
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL":
            found.append(str(arg).replace("\n", " "))
        elif op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(str(arg))
        elif op.name == "STACK_GLOBAL":
            found.append(" ".join(strings[-2:]))
    return [name for name in found if name.startswith("stateaware")]


@pytest.mark.parametrize("protocol", range(0, pickle.HIGHEST_PROTOCOL + 1))
def test_a_pickled_process_spec_names_the_class_at_stateaware_launch_spec(protocol):
    assert _globals(pickle.dumps(SPEC, protocol=protocol)) == ["stateaware.launch.spec ProcessSpec"]


def test_submitits_pickler_pickles_the_spec_by_that_name_not_by_value():
    data = cloudpickle.dumps(SPEC)
    assert _globals(data) == ["stateaware.launch.spec ProcessSpec"]
    assert pickle.loads(data) == SPEC and type(pickle.loads(data)) is ProcessSpec


def test_an_older_revisions_worker_unpickles_a_spec_made_here(tmp_path):
    # An older revision defines ProcessSpec in stateaware/launch/spec.py itself: its worker,
    # importing only its own tree, must read what this launcher pickled.
    old = tmp_path / "old" / "stateaware" / "launch"
    old.mkdir(parents=True)
    (old.parent / "__init__.py").write_text("")
    (old / "__init__.py").write_text("")
    source = (REPO / "stateaware" / "kinds" / "process_spec.py").read_text()
    (old / "spec.py").write_text(source.replace('ProcessSpec.__module__ = "stateaware.launch.spec"', "pass"))
    (tmp_path / "spec.pickle").write_bytes(pickle.dumps(SPEC))
    script = textwrap.dedent(
        """
        import pickle, sys
        sys.path.insert(0, sys.argv[1])  # the older revision's tree, and nothing of this one
        spec = pickle.loads(open(sys.argv[2], "rb").read())
        import stateaware
        print(type(spec).__module__, stateaware.__file__, spec.to_json())
        """
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", script, str(tmp_path / "old"), str(tmp_path / "spec.pickle")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    module, package, spec_json = done.stdout.split(" ", 2)
    assert module == "stateaware.launch.spec" and package == str(tmp_path / "old" / "stateaware" / "__init__.py")
    assert spec_json.strip() == SPEC.to_json()


def _tree(root: Path, rel: str, source: str) -> Path:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(source)
    (root / "conf" / "cohort").mkdir(parents=True, exist_ok=True)
    (root / "conf" / "cohort" / "demo.yaml").write_text("kind: demo\n")
    return root


def test_compare_to_reads_the_spec_fields_where_either_layout_defines_them(tmp_path):
    source = (REPO / "stateaware" / "kinds" / "process_spec.py").read_text()
    older = _tree(tmp_path / "older", "stateaware/launch/spec.py", source)
    newer = _tree(tmp_path / "newer", "stateaware/kinds/process_spec.py", source)
    (newer / "stateaware" / "launch").mkdir()
    (newer / "stateaware" / "launch" / "spec.py").write_text((REPO / "stateaware/launch/spec.py").read_text())
    fields = list(ProcessSpec.__dataclass_fields__)
    assert pair._process_spec_fields(older) == pair._process_spec_fields(newer) == fields
    pair._check_config("older", older, "demo")
    pair._check_config("newer", newer, "demo")
    other = _tree(tmp_path / "other", "stateaware/launch/spec.py", source.replace("    cpus: tuple", "    gpus: tuple"))
    with pytest.raises(pair.ConfigError, match=r"its process spec \(ProcessSpec.*other fields"):
        pair._check_config("other", other, "demo")
    with pytest.raises(pair.ConfigError, match="other fields"):
        pair._check_config("none", _tree(tmp_path / "none", "stateaware/x.py", ""), "demo")


#: The kinds stateaware ships: the module of every ``kind:`` in conf/cohort/.
SHIPPED = sorted({line.split(":", 1)[1].strip() for p in (REPO / "conf" / "cohort").glob("*.yaml")
                  for line in p.read_text().splitlines() if line.startswith("kind:")})  # fmt: skip


@pytest.mark.parametrize("kind", SHIPPED)
def test_every_shipped_kind_meets_the_kind_protocol_and_names_sections_that_meet_theirs(kind):
    module = load_kind(kind)
    assert isinstance(module, Kind)
    for name in report_sections(kind, module) or ("stateaware.analysis.generic",):
        section = importlib.import_module(name)
        assert isinstance(section, ReportSection) and isinstance(section.TITLE, str), name


def test_the_protocols_refuse_a_module_without_their_members():
    assert not isinstance(types.ModuleType("no_run"), Kind)
    titled = types.ModuleType("titled")
    titled.TITLE = "x"  # type: ignore[attr-defined]
    assert not isinstance(titled, ReportSection)
    titled.render = lambda con: ""  # type: ignore[attr-defined]
    assert isinstance(titled, ReportSection)
