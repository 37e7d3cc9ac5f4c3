"""The report's sections: one module per section, named for what it renders.

A section module has ``TITLE: str`` (its heading) and ``render(con) -> str`` (its Markdown
body over a DuckDB connection whose views hold only the runs it renders), and may have
``figures(con, out)`` (the figures it draws under ``out``); the generic section also has
``title_for(kind, cohorts)``. A cohort kind names its sections in ``REPORT``
(``cohorts/__init__.py``) and each run records them (``runs.report_sections``); the report
(``stateaware.analysis.report``) imports them by those names. The SQL the sections run is
in ``sql/``, run through ``queries``.
"""
