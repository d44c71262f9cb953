"""Large toolsets: ``Toolset.from_openapi`` time, the prompt view's size, a fresh session's first run,
and the tokens shown to the model in code mode vs JSON mode with deferred loading.

The document is GitHub's official OpenAPI description when it is in the cache (the bench never
downloads: ``scripts/fetch-github-openapi.sh`` fetches it once with ``npm pack @octokit/openapi`` into
``$CODEACT_CACHE/bench/api.github.com.json``, default ``~/.cache/codeact/bench/``), else the
generated GitHub-like document the tests use (hundreds of operations). Tokens are estimated as
characters / 4 (no tokenizer dependency); what is compared is the same text in both modes:

* code mode: the system prompt's tool part (the prompt view) + the stubs of what
  ``describe_tool`` returns for the tools a task needs;
* JSON, all tools: every tool definition (name, description, input schema) as JSON, each request;
* JSON, deferred: ``search_tools``' definition, then the definitions of the tools one search found.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from codeact import Runtime, Toolset
from codeact.agent.json_agent import FunctionCallingAgent, wire_names
from codeact.agent.models.scripted import ScriptedModel
from codeact.tool_stubs.render import render_stubs

from ._common import Context, Row, med_p90

LOAD_S = 3.0
PROMPT_CHARS = 8000
FIRST_RUN_MS = 1000.0
ROWS = [("openapi_load", "Toolset.from_openapi of a large document (file → tools)", "s", f"≤ {LOAD_S:g} s"),
        ("prompt_view", "prompt view of that toolset (default budget)", "chars", f"≤ {PROMPT_CHARS}"),
        ("large_first_run", "fresh session with that toolset, no pool: first run", "ms", f"≤ {FIRST_RUN_MS:g} ms"),
        ("large_pooled_run", "pooled session with that toolset: acquire → first result", "ms", "—"),
        ("tokens_code", "tokens shown to the model, code mode (index + 3 described tools)", "tokens", "—"),
        ("tokens_json_deferred", "tokens shown, JSON mode, deferred (search + 5 found), per request", "tokens",
         "—"),
        ("tokens_json_all", "tokens shown, JSON mode, all definitions, per request", "tokens", "—"),
        ("search_top5", "search quality: intended operation in the top 5", "%", "≥ 90 %")]

def _document() -> tuple[Any, str]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.servers.github_tasks import github_document

    github = github_document()
    if github.is_file():
        return github, "GitHub api.github.com.json"
    from tests.servers.big_openapi import big_document

    return big_document(), "generated GitHub-like document"


def _tokens(text: str) -> float:
    return round(len(text) / 4)


def measure(ctx: Context) -> list[Row]:
    source, label = _document()
    loads: list[float] = []
    toolset: Toolset | None = None
    for _ in range(ctx.n(3, 1)):
        start = time.perf_counter()
        toolset = Toolset.from_openapi(source, base_url="http://127.0.0.1:9")  # never contacted
        loads.append(time.perf_counter() - start)
    assert toolset is not None
    note = f"{label}: {len(toolset)} operations"
    rows = [Row("openapi_load", ROWS[0][1], "s", *med_p90(loads), target=ROWS[0][3], met=max(loads) <= LOAD_S,
                samples=len(loads), note=note)]
    full_chars = len(render_stubs(toolset.specs, prompt=True))
    with Runtime(toolset, ctx.subject) as rt:
        view = rt.prompt_view
        rows.append(Row("prompt_view", ROWS[1][1], "chars", len(view), len(view), target=ROWS[1][3],
                        met=len(view) <= PROMPT_CHARS, samples=1,
                        note=f"every stub in full would be {full_chars:,} chars", extra={"full_chars": full_chars}))
        firsts, cpu = _first_runs(rt, ctx.n(5, 1))
        rows.append(Row("large_first_run", ROWS[2][1], "ms", *med_p90(firsts), target=ROWS[2][3],
                        met=max(firsts) <= FIRST_RUN_MS, samples=len(firsts), extra={"kernel_cpu_ms": cpu},
                        note=f"{ctx.subject_label} backend; sandbox module {len(rt.stubs):,} chars (lean stubs); "
                             f"kernel CPU start → first result {med_p90(cpu)[0]:.0f} ms"))
    with Runtime(toolset, ctx.subject.model_copy(update={"pool_size": 2})) as rt:
        pooled, cpu = _first_runs(rt, ctx.n(8, 2))
        rows.append(Row("large_pooled_run", ROWS[3][1], "ms", *med_p90(pooled), samples=len(pooled),
                        extra={"kernel_cpu_ms": cpu},
                        note="SandboxConfig(pool_size=2), refilled before each sample; kernel CPU start → first "
                             f"result {med_p90(cpu)[0]:.0f} ms (stub setup included)"))
        rows += _token_rows(rt, toolset)
        rows.append(_search_row(rt, label))
    return rows


def _first_runs(rt: Runtime, count: int) -> tuple[list[float], list[float]]:
    """Wall ms of ``count`` new sessions' first result (a search, then a tool named in the code),
    and each kernel's CPU ms from its start to that result."""
    tool = rt.views.catalog.search("create a comment on an issue", 1)[0]["python_name"]
    code = f"search_tools('create a comment on an issue', 1)\n{tool}.__name__, __import__('time').process_time()"
    walls, cpu = [], []
    for _ in range(count):
        if rt.pool is not None and not rt.pool.wait_ready(120):
            raise RuntimeError(f"the pool did not fill: {rt.pool.last_error}")
        start = time.perf_counter()
        with rt.session() as session:
            result = session.run(code)
            walls.append((time.perf_counter() - start) * 1000)
        if not result.ok:
            raise RuntimeError(f"first run failed: {result.error}")
        cpu.append(result.value[1] * 1000)
    return walls, cpu


def _token_rows(rt: Runtime, toolset: Toolset) -> list[Row]:
    catalog = rt.views.catalog
    hits = catalog.search("create a comment on an issue", 5)
    code = rt.prompt_view + "".join(catalog.describe(h["name"]) or "" for h in hits[:3])
    agent = FunctionCallingAgent(ScriptedModel([]), toolset, runtime=rt, strict=False)
    wire = wire_names(toolset)
    deferred = json.dumps(agent._tool_defs(rt, [h["name"] for h in hits]))
    everything = json.dumps([{"name": wire[s.name], "description": s.description, "input_schema": s.input_schema}
                             for s in toolset.specs])
    return [Row("tokens_code", ROWS[4][1], "tokens", _tokens(code), _tokens(code), samples=1,
                note="characters / 4; shown once (the prompt), the described stubs once each"),
            Row("tokens_json_deferred", ROWS[5][1], "tokens", _tokens(deferred), _tokens(deferred), samples=1,
                note="characters / 4; sent with every request after the search"),
            Row("tokens_json_all", ROWS[6][1], "tokens", _tokens(everything), _tokens(everything), samples=1,
                note="characters / 4; what every request would carry without deferred loading")]


def _search_row(rt: Runtime, label: str) -> Row:
    catalog = rt.views.catalog
    if label.startswith("GitHub"):
        from tests.servers.github_tasks import GITHUB_TASKS as tasks
    else:
        from tests.servers.big_openapi import SEARCH_TASKS as tasks
    known = [(t, want) for t, want in tasks if catalog.resolve(want) is not None]
    hits = sum(want in [h["name"] for h in catalog.search(t, 5)] for t, want in known)
    share = 100.0 * hits / len(known) if known else 0.0
    return Row("search_top5", ROWS[7][1], "%", share, share, target=ROWS[7][3], met=share >= 90.0,
               samples=len(known), note=f"{hits} of {len(known)} tasks on the {label}")
