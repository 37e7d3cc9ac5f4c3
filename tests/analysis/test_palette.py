"""One colour per method across every figure of the report."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from stateaware.analysis.figures import METHOD_COLOURS, colour


def test_every_method_the_cohorts_run_has_its_own_colour():
    from stateaware.app.protocol import METHODS as APPLICATION
    from stateaware.cost_runtime import METHODS as TIMING

    methods = set(TIMING) | set(APPLICATION)
    assert methods <= set(METHOD_COLOURS)
    assert len({colour(m) for m in methods}) == len(methods)


@given(st.text(min_size=1, max_size=30))
def test_a_method_of_a_users_kind_keeps_one_colour(method):
    from stateaware.analysis.figures import _OTHERS

    assert colour(method) == colour(method) and colour(method).startswith("#") and len(colour(method)) == 7
    assert colour(method) == METHOD_COLOURS[method] if method in METHOD_COLOURS else colour(method) in _OTHERS


def test_a_users_method_keeps_its_colour_from_run_to_run():
    """Another interpreter, with another string-hash seed, picks the same colours (not ``hash()``)."""
    import os
    import subprocess
    import sys

    methods = ["mine", "ours_v2", "baseline", "régions", "x"]
    code = (
        "import sys; from stateaware.analysis.figures import colour; print(' '.join(colour(m) for m in sys.argv[1:]))"
    )
    picked = set()
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code, *methods],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.split()
        picked.add(tuple(out))
    assert picked == {tuple(colour(m) for m in methods)}


def test_figure3c_colours_each_method_as_the_other_figures_do(tmp_path, monkeypatch):
    """Figure 3C draws each method in its palette colour, labels each method's mean and has a title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from stateaware.analysis.sections import cifar_application as application

    procs = [
        {"seed": 1, "method": m, "observed": True, "peak_allocated_bytes": (i + 1) << 20, "encoder_seconds": 1.0 + i}
        for i, m in enumerate(application._METHODS)
    ]
    monkeypatch.setattr(application, "process_rows", lambda con: procs)
    drawn = {}
    real_close = plt.close

    def keep(fig):
        drawn["fig"] = fig
        real_close(fig)

    monkeypatch.setattr(plt, "close", keep)
    application.figure3c(None, tmp_path / "f.png")
    ax = drawn["fig"].axes[0]
    from matplotlib.colors import to_hex

    dots = {c.get_label(): to_hex(c.get_facecolor()[0]) for c in ax.collections if not c.get_label().startswith("_")}
    assert dots == {m: colour(m).lower() for m in application._METHODS}
    assert sorted(t.get_text() for t in ax.texts) == sorted(application._METHODS)
    assert ax.get_title().startswith("Figure 3C (cifar)")
