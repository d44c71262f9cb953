"""Experiments and batches: code actions vs function calls, at any scale.

    from codeact.evals import load_suite, run_suite, write_report, map_code

    run_suite("weather", "scripted", out="runs/weather", modes=("code", "json"), repeats=3)
    write_report("runs/weather")                 # report.md, report.html, summary.json, PNGs

Suites (:mod:`.suite`, :mod:`.checks`, built-ins in :mod:`.suites`), the runner (:mod:`.runner`,
resumable results in :mod:`.results_store`), the report (:mod:`.report`; plots need the ``plots``
extra), batches (:mod:`codeact.runtime.batch`, with a bar), Ray scale-out
(``engine="ray"``: the episodes' sessions on :mod:`codeact.cluster`; the ``ray`` extra, imported
only when asked for) and the progress bar they show
(:mod:`.progress`).

Floor 5 of the layers (docs/architecture.md): imports ``agent`` and below, never a higher floor.
"""

from __future__ import annotations

from ..runtime.batch import function_code, map_code
from .checks import Check, custom, exact, list_equal, numeric, set_equal
from .providers import ModelSpec, ScriptedProvider
from .report import summarize, wilson, write_report
from .results_store import EpisodeResult, ResultsStore, RunMeta, load_run
from .runner import RunSummary, run_suite
from .suite import MODES, EpisodeKey, Suite, Task, load_suite

# Alike by design (the other packages' lists): names, one a line; pinned in tests/test_subpackage_api.py.
__all__ = [
    "MODES",
    "Check",
    "EpisodeKey",
    "EpisodeResult",
    "ModelSpec",
    "ResultsStore",
    "RunMeta",
    "RunSummary",
    "ScriptedProvider",
    "Suite",
    "Task",
    "custom",
    "exact",
    "function_code",
    "list_equal",
    "load_run",
    "load_suite",
    "map_code",
    "numeric",
    "run_suite",
    "set_equal",
    "summarize",
    "wilson",
    "write_report",
]
