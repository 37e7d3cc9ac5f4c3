"""``analysis sql`` over parts the cache already vouches for imports neither pyarrow nor numpy
(NOTE [ No Arrow until it reads ] in ``stateaware.analysis.store.views``): ~0.15 s of a small query.
A part the cache has not seen is checked through Arrow, so the first query may import them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import launch_small_run

pytestmark = pytest.mark.usefixtures("fresh_part_cache")

#: ``analysis sql`` as a user runs it, then the heavy modules it imported, as one JSON line on
#: stderr. ``settle`` (argv[1]) "now" caches parts however fresh (part_cache.SETTLE_NS), as a
#: store whose parts were written a while ago is.
_SQL_THEN_MODULES = """
import json, sys
from stateaware.records import part_cache
if sys.argv.pop(1) == "now":
    part_cache.SETTLE_NS = -(10**18)
from stateaware.analysis.__main__ import main
try:
    code = main(sys.argv[1:])
finally:
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("pyarrow", "numpy", "pandas", "torch"))
    print(json.dumps(heavy), file=sys.stderr)
sys.exit(code)
"""

QUERIES = (
    "SELECT method, count(*) AS n FROM timings GROUP BY method ORDER BY method",
    "SELECT status, count(*) AS n FROM processes GROUP BY status",
    "SELECT count(*) AS n FROM comparisons",
    "SELECT r.run_id, count(*) AS n FROM runs r JOIN records USING (run_id) GROUP BY r.run_id",
)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imports") / "results"
    launch_small_run(out, "r1", "cohort.params.steps=2", processes=3)
    return out


def _sql(results: Path, settle: str, fmt: str, query: str) -> tuple[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _SQL_THEN_MODULES, settle, "sql", "--results", str(results), "--format", fmt, query],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(done.stderr.strip().splitlines()[-1])


#: Every query as CSV, and the first in the other formats (each writer streams its own way).
CASES = [*(("csv", q) for q in QUERIES), ("json", QUERIES[0]), ("table", QUERIES[0])]


@pytest.mark.parametrize(("fmt", "query"), CASES)
def test_a_query_over_vouched_parts_imports_no_arrow(results, fmt, query):
    first, imported = _sql(results, "now", fmt, query)  # a fresh cache: every part checked through Arrow
    assert "pyarrow" in imported
    again, imported = _sql(results, "later", fmt, query)
    assert imported == []
    assert again == first  # the same answer, byte for byte
    assert again.strip()


def test_a_part_the_cache_has_not_seen_is_checked_through_arrow(results, tmp_path):
    import shutil

    copy = Path(shutil.copytree(results, tmp_path / "copy"))
    query = QUERIES[0]
    before, _ = _sql(copy, "now", "csv", query)
    (part,) = sorted((copy / "timings").rglob("p000000-*.parquet"))
    part.write_bytes(part.read_bytes())  # the same bytes, a new file version: the cache's answer no longer holds
    after, imported = _sql(copy, "later", "csv", query)
    assert "pyarrow" in imported
    assert after == before
