"""The report's sections as text and table cells, shared by its Markdown and HTML forms."""

from __future__ import annotations

from typing import Any

from ._summary import LAYERS, Report

__all__ = ["episodes_table", "intro", "mode_table", "notes", "paired_text", "task_table"]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def mode_table(report: Report) -> tuple[list[str], list[list[str]]]:
    """The per-mode table (header, rows), shared by Markdown and HTML."""
    header = ["mode", "episodes", "success", "95% CI (Wilson)", "turns", "model calls", "tokens in", "tokens out",
              "tool calls", "wall s", "of which sandbox start s", "tokens / success",
              *(f"errors: {layer}" for layer in LAYERS)]
    rows = []
    for s in report.modes:
        unknown = "unknown" if s.usage_unknown_calls else "–"
        tps = f"{s.tokens_per_success:.1f}" if s.tokens_per_success is not None else unknown
        tin = f"{s.tokens_in:.1f}" if s.tokens_in is not None else "unknown"
        tout = f"{s.tokens_out:.1f}" if s.tokens_out is not None else "unknown"
        rows.append([s.mode, str(s.episodes), f"{_pct(s.success_rate)} ({s.successes}/{s.episodes})",
                     f"[{_pct(s.ci_low)}, {_pct(s.ci_high)}]", f"{s.turns:.2f}", f"{s.model_calls:.2f}",
                     tin, tout, f"{s.tool_calls:.2f}", f"{s.wall_s:.3f}", f"{s.sandbox_start_s:.3f}", tps,
                     *(str(s.errors.get(layer, 0)) for layer in LAYERS)])
    return header, rows


def episodes_table(report: Report) -> tuple[list[str], list[list[str]]]:
    """Where each mode's planned episodes went (header, rows)."""
    header = ["mode", "planned", "finished", "compared", "answered", "incomplete", "errors", "harness failures",
              "provider errors (retryable)", "not run"]
    rows = []
    for s in report.modes:
        answered = s.status.get("answered", 0)
        rows.append([s.mode, str(s.planned), str(s.finished), str(s.episodes), str(answered), str(s.incomplete),
                     str(s.error_episodes), str(s.harness_failures), str(s.provider_errors), str(s.not_run)])
    return header, rows


def notes(report: Report) -> list[str]:
    """The lines saying how to read the numbers: unit of analysis, token source, warnings."""
    notes = ["Unit of analysis: the task (each mode's success rate per task over its repeats); per-mode rates "
             "and means are over the compared episodes: those whose task and repeat finished in both modes.",
             f"Tokens: {report.token_source}.",
             "Wall s: the whole episode, the sandbox's start included; \"of which sandbox start s\" is that "
             "start (the first code action's cold start, a pooled sandbox's hand-over), shown apart."]
    notes += [f"Warning: {w}." for w in report.warnings]
    return notes


def task_table(report: Report) -> tuple[list[str], list[list[str]]]:
    modes = [s.mode for s in report.modes]
    header = ["task", *(f"{m} success" for m in modes), *(f"{m} turns" for m in modes),
              *(f"{m} tokens" for m in modes), "identical repeats"]
    paired = {"code", "json"} <= set(modes)
    if paired:
        header += ["code − json", "p (Fisher exact)"]
    rows = []
    for t in report.tasks:
        cells = [t.task_id]
        cells += [f"{t.success[m][0]}/{t.success[m][1]}" if m in t.success else "–" for m in modes]
        cells += [f"{t.turns[m]:.1f}" if m in t.turns else "–" for m in modes]
        cells += [_tokens(t.tokens[m]) if m in t.tokens else "–" for m in modes]
        cells.append(", ".join(t.identical_repeats) or "–")
        if paired:
            if "code" in t.success and "json" in t.success:
                diff = t.success["code"][0] / t.success["code"][1] - t.success["json"][0] / t.success["json"][1]
                cells += [f"{diff:+.2f}", f"{t.p_value:.3f}" if t.p_value is not None else "–"]
            else:
                cells += ["–", "–"]
        rows.append(cells)
    return header, rows


def _tokens(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.0f}"


def intro(report: Report, n: int) -> str:
    m = report.meta
    if m is None:
        return f"{n} episodes."
    return (f"Suite **{m.suite}**, model **{m.model}**, modes {', '.join(m.modes)}, {m.repeats} repeat(s), "
            f"backend {m.backend or '?'}, engine {m.engine}; {n} compared episodes, {len(report.tasks)} tasks; "
            f"run fingerprint {m.fingerprint_id or '(none)'}.")


def paired_text(p: dict[str, Any]) -> str:
    if not p["tasks"]:
        return "No task was run in both modes: no paired comparison."
    e = p["episode_level"]
    text = (f"Unit of analysis: the task ({p['tasks']} tasks run in both modes; each mode's success rate per task "
            f"over its repeats). Code better on {p['code_better']}, JSON better on {p['json_better']}, tied on "
            f"{p['ties']}; mean difference code − json {p['mean_difference']:+.3f} (95% CI "
            f"[{p['ci_low']:+.3f}, {p['ci_high']:+.3f}], {p['ci_method']}); exact sign test p = "
            f"{p['sign_test_p']:.3f}; exact Wilcoxon signed-rank p = {p['wilcoxon_p']:.3f}. "
            f"For reference only (repeats are not independent): {e['pairs']} episode pairs (same task and "
            f"repeat), only code {e['only_code']}, only JSON {e['only_json']}, McNemar p = {e['mcnemar_p']:.3f}.")
    same = p["identical_repeats"]
    if same["cells"]:
        text += (f" Warning: in {same['cells']} of {same['of']} task × mode cells every repeat was the same "
                 "episode (a deterministic model?): those repeats add no information.")
    return text
