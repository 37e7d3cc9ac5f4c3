"""``python -m stateaware cohort=NAME [overrides]``: launch a cohort (see stateaware.cli)."""

from stateaware.cli import main

if __name__ == "__main__":
    main()
