"""``python -m stateaware.cost_runtime.freeze``: cells come from the config folder it is given."""

from __future__ import annotations

import json

import pytest

from stateaware.commands.freeze_cards import main

LAB = """name: lab
device: cpu
scale: 1.0
params:
  cost_runtime:
    granularity_bytes: 256
    cells:
      tiny: {workload: feature_queue, buffer_bytes: 16384, write_fraction: 0.01,
             live_segments: 3, width: 8, batch: 4, rank: 1}
"""


def test_freeze_reads_the_hardware_profile_from_conf_and_freezes_its_cell(tmp_path, capsys):
    conf = tmp_path / "conf"
    (conf / "hardware").mkdir(parents=True)
    (conf / "hardware" / "lab.yaml").write_text(LAB)
    cards = tmp_path / "cards"
    assert (
        main(["--conf", str(conf), "--hardware", "lab", "--cell", "tiny", "--repeats", "1", "--dir", str(cards)]) == 0
    )
    (path,) = cards.glob("tiny-*.json")
    digest = capsys.readouterr().out.split()[1]
    assert path.name == f"tiny-{digest[:12]}.json"
    doc = json.loads(path.read_text())
    assert doc["provenance"]["hardware"] == "lab" and doc["provenance"]["shape"]["buffer_bytes"] == 16384


def test_an_unknown_profile_or_cell_exits_2_naming_the_valid_ones(tmp_path, capsys):
    conf = tmp_path / "conf"
    (conf / "hardware").mkdir(parents=True)
    (conf / "hardware" / "lab.yaml").write_text(LAB)
    with pytest.raises(SystemExit) as exit_:
        main(["--conf", str(conf), "--hardware", "h200", "--cell", "tiny"])
    assert exit_.value.code == 2 and "hardware=h200: no file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["--conf", str(conf), "--hardware", "lab", "--cell", "huge"])
    assert (
        exit_.value.code == 2
        and "cell 'huge' is not in hardware.params.cost_runtime.cells; valid cells are: tiny" in capsys.readouterr().err
    )


def test_a_cohort_with_its_own_byte_scale_freezes_cards_that_record_it(tmp_path, capsys):
    conf = tmp_path / "conf"
    (conf / "hardware").mkdir(parents=True)
    (conf / "cohort").mkdir()
    (conf / "hardware" / "lab.yaml").write_text(LAB.replace("scale: 1.0\n", "scale: 1.0\nscales: {mine: 0.25}\n"))
    (conf / "cohort" / "mine.yaml").write_text("name: mine\nkind: timing\nparams:\n  cells: [tiny]\n")
    cards = tmp_path / "cards"
    assert (
        main(["--conf", str(conf), "--hardware", "lab", "--cohort", "mine", "--repeats", "1", "--dir", str(cards)]) == 0
    )
    (path,) = cards.glob("tiny-*.json")
    assert json.loads(path.read_text())["provenance"]["scale"] == 0.25  # as resolve_hardware gives the run
