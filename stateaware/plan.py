"""``python -m stateaware.plan``: the planner's command line, at the path users type.

The tool lives in ``stateaware.commands.plan`` with the other command lines; this module
forwards to it, so ``python -m stateaware.plan`` and ``from stateaware.plan import main``
keep working.
"""

from stateaware.commands.plan import *  # noqa: F403 - the tool's names, forwarded
from stateaware.commands.plan import __all__, frontier_figure, main, plot_frontier, script  # noqa: F401 - named for readers and mypy

if __name__ == "__main__":
    script()
