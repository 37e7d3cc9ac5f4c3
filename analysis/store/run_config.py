"""What a run recorded about itself: its config (``runs.config_yaml``) as plain data.

The analysis decides by what each run recorded — its kind, its report sections, whether
its cohort places a logical budget, which grid it ran — never by a cohort's name, and
never by today's YAML files (a report is rebuilt from the Parquet files alone).
"""

from __future__ import annotations

from typing import Any

__all__ = ["config_of", "cohort_config"]


def config_of(config_yaml: str | None) -> dict[str, Any]:
    """The recorded config as nested plain dicts (empty for a missing or empty one)."""
    if not config_yaml:
        return {}
    # lazy: omegaconf only when a config is read (this module is imported at the analysis command line's start-up)
    from omegaconf import OmegaConf

    doc = OmegaConf.to_container(OmegaConf.create(config_yaml), resolve=False)
    return doc if isinstance(doc, dict) else {}


def cohort_config(config_yaml: str | None) -> dict[str, Any]:
    """The recorded ``cohort`` section (``{}`` when the run recorded none)."""
    cohort = config_of(config_yaml).get("cohort")
    return cohort if isinstance(cohort, dict) else {}
