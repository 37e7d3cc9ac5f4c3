"""The stability thresholds: when a timed process's steps are too noisy, waited or shared to trust.

A leaf, so that both the run description (``stateaware.config``, which records the
thresholds with each run) and the analysis (``stateaware.analysis.stats.stability``, which
applies them) import the one definition. Each value says why it is what it is.
"""

from __future__ import annotations

__all__ = ["MAX_CV", "MAX_OTHER_SHARE", "MAX_WALL_OVER_CPU"]

#: Largest accepted coefficient of variation of one method's measured steps in one process.
#: The cost-runtime steps are deterministic programs on fixed shapes; on a quiet core their
#: steps repeat within a few percent (the thread clock closer still), so a CV above 10 %
#: means something other than the program varied — and since each process's mean enters a
#: paired ratio, a 10 % step CV over 20 steps already moves that mean by ~2 %, the size of
#: the effects the prespecified ratios resolve.
MAX_CV = 0.10

#: Largest accepted wall/CPU ratio of a method's measured steps (checked on ``cpu``-clock
#: runs: one thread on a CPU, where an undisturbed thread is on a core for its whole step
#: and the ratio is 1.00–1.05 — page faults and timer ticks). 1.15 means the thread waited
#: for a core for over an eighth of its step: another process held it.
MAX_WALL_OVER_CPU = 1.15

#: Largest accepted share of the process's CPUs' time taken by other processes. A quiet
#: machine's daemons and the launcher's own polling take a few percent; one busy process
#: beside a one-CPU pin takes ~50 %. 10 % is well above the first and far below the second.
MAX_OTHER_SHARE = 0.10
