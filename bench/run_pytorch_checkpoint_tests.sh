#!/usr/bin/env bash
# Run PyTorch's own non-reentrant checkpoint tests with ours routed in.
#
#   bench/run_pytorch_checkpoint_tests.sh PYTORCH [REV] [-- PYTEST_ARGS...]
#
# PYTORCH is a PyTorch git directory (e.g. the one `fetch github:pytorch/pytorch` brings:
# test files are read with `git --git-dir=PYTORCH show REV:test/...`, REV defaults to
# HEAD — pick the commit of the installed torch's release) or a PyTorch source checkout.
# test/test_autograd.py and test/test_utils.py are copied into a scratch folder outside
# this repository (nothing of PyTorch's is kept), next to a conftest.py that opens
# stateaware.torch_replay.route() for the session: every non-reentrant checkpoint call
# (checkpoint(use_reentrant=False), its decorator form, checkpoint_sequential) runs on
# ours with the modules it reaches declared; reentrant calls stay torch's (ROUTE=torch
# keeps torch's everywhere, for a baseline). Each test records how many non-reentrant
# calls it made (route's count, or a counter at the same generator for ROUTE=torch);
# the summary counts only those tests ("reach ours") — the others never exercise our code. Runs on CPU only (CUDA hidden): GPU-only tests skip.
#
# Default selection: -k "checkpoint or Checkpoint or recompute" (override after --).
# A test that counts the replay by a side effect on a module it reaches (a Python counter
# attribute) sees one call under ROUTE_STATE=reached — the replay's writes to declared
# state are undone, as BatchNorm's are — and two under ROUTE_STATE=none.
# Environment: PYTHON (default: this repo's .venv/bin/python), ROUTE=ours|torch,
# ROUTE_STATE=reached|none (route's state=, default reached),
# KEEP=1 keeps the scratch folder, DEPS=folder of extra packages the tests import
# (torch.testing._internal needs `expecttest`: pip install --target DEPS expecttest).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
src=${1:?usage: $0 PYTORCH_GIT_DIR_OR_CHECKOUT [REV] [-- PYTEST_ARGS...]}
shift
rev=HEAD
if [[ $# -gt 0 && $1 != "--" ]]; then rev=$1; shift; fi
[[ $# -gt 0 && $1 == "--" ]] && shift
select=("$@")
[[ ${#select[@]} -eq 0 ]] && select=(-k "checkpoint or Checkpoint or recompute")

work=$(mktemp -d /tmp/pt_ckpt_tests.XXXXXX)
[[ ${KEEP:-0} == 1 ]] || trap 'rm -rf "$work"' EXIT
for f in test_autograd.py test_utils.py; do
  if [[ -f $src/test/$f ]]; then
    cp "$src/test/$f" "$work/$f"
  elif git --git-dir="$src" cat-file -e "$rev:test/$f" 2>/dev/null; then
    git --git-dir="$src" show "$rev:test/$f" >"$work/$f"
  else
    echo "no test/$f in $src (at $rev); pass a PyTorch git dir or source checkout" >&2
    exit 2
  fi
done
if git --git-dir="$src" rev-parse -q --verify "$rev^{commit}" >/dev/null 2>&1; then
  echo "PyTorch tests from $(git --git-dir="$src" rev-parse "$rev") ($(git --git-dir="$src" log -1 --format=%cs "$rev"))"
fi

cat >"$work/conftest.py" <<'EOF'
"""Route every non-reentrant torch checkpoint to stateaware's with route() (ROUTE=torch: count only)."""
import json
import os

import pytest
import torch.utils.checkpoint as tuc

from stateaware.torch_replay import route

if os.environ.get("ROUTE", "ours") == "ours":
    _handle = route(state=os.environ.get("ROUTE_STATE", "reached"))  # the whole session, before any test imports

    def _calls():
        return _handle.calls

else:  # torch's own, counted at the same generator route() swaps
    _name = next(n for n in ("_checkpoint_without_reentrant_generator_impl",
                             "_checkpoint_without_reentrant_generator") if hasattr(tuc, n))
    _torch, _count = getattr(tuc, _name), [0]

    def _counted(*args, **kwargs):
        _count[0] += 1
        return _torch(*args, **kwargs)

    setattr(tuc, _name, _counted)

    def _calls():
        return _count[0]


_start = [0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "setup":
        _start[0] = _calls()
    if report.failed or (report.when == "call") or report.skipped:
        if not hasattr(item, "_verdict") or report.failed:
            item._verdict = "skipped" if report.skipped else report.outcome
    if report.when == "teardown":
        with open(os.environ["REACH_LOG"], "a") as log:
            log.write(json.dumps({"test": item.nodeid, "reached": _calls() - _start[0],
                                  "outcome": getattr(item, "_verdict", report.outcome)}) + "\n")
EOF

cd "$work"
export REACH_LOG=$work/reach.jsonl CUDA_VISIBLE_DEVICES="" PYTORCH_TESTING_DEVICE_ONLY_FOR=cpu
export PYTHONPATH=$here${DEPS:+:$DEPS}${PYTHONPATH:+:$PYTHONPATH} ROUTE=${ROUTE:-ours}
"$py" -c "import expecttest" 2>/dev/null || {
  echo "torch.testing._internal needs expecttest: pip install --target DIR expecttest, then DEPS=DIR $0 ..." >&2
  exit 2
}
set +e
"$py" -m pytest -q -p no:cacheprovider -o addopts="" test_autograd.py test_utils.py "${select[@]}" >"$work/pytest.log" 2>&1
set -e
"$py" - "$REACH_LOG" <<'EOF'
import json, os, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
reach = [r for r in rows if r["reached"] > 0]
ok = [r for r in reach if r["outcome"] == "passed"]
print(f"route={os.environ['ROUTE']} state={os.environ.get('ROUTE_STATE', 'reached')}: {len(rows)} selected, {len(reach)} reach the non-reentrant "
      f"checkpoint, {len(ok)} of them pass")
for r in reach:
    if r["outcome"] != "passed":
        print(f"  {r['outcome'].upper():7s} {r['test']}")
EOF
tail -n 3 "$work/pytest.log"
