"""``codeact agent`` (run a task, each step shown as it happens) and ``codeact replay`` (show a trace)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from .._text import one_line
from ..errors import SandboxUnavailable
from ._exec import load_toolset
from ._interrupt import EXIT_INTERRUPTED, interrupts
from ._options import Image, Pip, check_sandbox, machine_stdout, sandbox_config, say_unavailable

__all__ = ["EventPrinter", "register"]

_FENCE_OUT = r"```[ \t]*(?:python3?|py)[ \t]*\n.*?(?:^[ \t]*```|\Z)"


def _short(value: Any, limit: int = 100) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return escape(one_line(text, limit))


class EventPrinter:
    """Prints trace events readably, live (``on_event``) or from a trace file."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.mode = "code"

    def __call__(self, event: dict[str, Any]) -> None:
        handler = getattr(self, "_" + str(event.get("event")), None)
        if handler is not None:
            handler(event)

    def _episode_start(self, e: dict[str, Any]) -> None:
        self.mode = str(e.get("mode", "code"))
        self.console.rule(f"[bold]{escape(self.mode)} mode[/bold] · {_short(e.get('model'))}")
        self.console.print(f"[bold]task:[/bold] {_short(e.get('task'), 2000)}", highlight=False)

    def _model_response(self, e: dict[str, Any]) -> None:
        import re

        r = e.get("response") or {}
        usage = r.get("usage") or {}
        self.console.rule(f"model call {e.get('call')} · {r.get('stop_reason')} · {usage.get('input_tokens', 0)} in / "
                          f"{usage.get('output_tokens', 0)} out · {e.get('duration_ms', 0):.0f} ms", style="dim")
        text = str(r.get("text") or "")
        if self.mode == "code":
            text = re.sub(_FENCE_OUT, "", text, flags=re.DOTALL | re.MULTILINE | re.IGNORECASE)
        if text.strip():
            self.console.print(Text(text.strip()))
        for call in r.get("tool_calls") or []:
            if self.mode == "code" and call.get("name") == "execute_python" and not call.get("parse_error"):
                continue
            args = call.get("arguments") if call.get("arguments") is not None else call.get("arguments_raw")
            bad = f"  [red]({_short(call['parse_error'])})[/red]" if call.get("parse_error") else ""
            self.console.print(f"[cyan]→ {_short(call.get('name'))}[/cyan]({_short(args)}){bad}", highlight=False)

    def _code(self, e: dict[str, Any]) -> None:
        self.console.print(Panel(Syntax(str(e.get("code", "")), "python", line_numbers=True, word_wrap=True),
                                 title=f"code ({e.get('source')})", title_align="left", border_style="blue"))

    def _execution(self, e: dict[str, Any]) -> None:
        result = e.get("result") or {}
        style = "green" if result.get("ok") else "red"
        head = f"{escape(str(result.get('termination')))} in {result.get('duration_ms', 0):.0f} ms"
        if result.get("answered"):
            head += f" · final_answer({_short(result.get('final_answer'))})"
        self.console.print(Panel(Text(str(e.get("observation", ""))), title=head, title_align="left",
                                 border_style=style))

    # Live events of a code action as it runs (the execution panel after them shows the observation).
    def _stdout(self, e: dict[str, Any]) -> None:
        self.console.out(str(e.get("text", "")), end="", style="dim", highlight=False)

    def _stderr(self, e: dict[str, Any]) -> None:
        self.console.out(str(e.get("text", "")), end="", style="dim yellow", highlight=False)

    def _call_started(self, e: dict[str, Any]) -> None:
        if self.mode == "code":
            self.console.print(f"[dim]→ {_short(e.get('name'))}({_short(e.get('arguments'), 60)})[/dim]",
                               highlight=False)

    def _call_finished(self, e: dict[str, Any]) -> None:
        if self.mode == "code":
            err = e.get("error") or {}
            how = "[green]ok[/green]" if e.get("ok") else f"[red]{_short(err.get('code'))}[/red]"
            took = f"{e.get('duration_ms', 0):.0f} ms"
            self.console.print(f"[dim]← {_short(e.get('name'))}[/dim] {how} [dim]{took}[/dim]", highlight=False)

    def _tool_results(self, e: dict[str, Any]) -> None:
        for record in e.get("records") or []:
            if record.get("ok"):
                line = f"[green]✓[/green] {_short(record['name'])}({_short(record.get('arguments'), 60)}) → "
                line += _short(record.get("result"))
            else:
                err = record.get("error") or {}
                line = f"[red]✗ {_short(record['name'])}({_short(record.get('arguments'), 60)}) → "
                line += f"{_short(err.get('code'))}: {_short(err.get('message'))}[/red]"
            self.console.print(line, highlight=False)

    def _note(self, e: dict[str, Any]) -> None:
        self.console.print(f"[yellow]note ({_short(e.get('reason'))}):[/yellow] {_short(e.get('text'), 500)}",
                           highlight=False)

    def _budget(self, e: dict[str, Any]) -> None:
        self.console.print(f"[yellow]budget {_short(e.get('limit'))}:[/yellow] {_short(e.get('detail'), 500)}",
                           highlight=False)

    def _model_error(self, e: dict[str, Any]) -> None:
        self.console.print(f"[red]model error:[/red] {_short(e.get('message'), 1000)}", highlight=False)

    def _episode_end(self, e: dict[str, Any]) -> None:
        ep = e.get("episode") or {}
        colour = {"answered": "green", "incomplete": "yellow"}.get(str(ep.get("status")), "red")
        self.console.rule(f"[{colour}]{_short(ep.get('status'))}[/{colour}] · {_short(ep.get('stop_reason'))}")
        if ep.get("answer") is not None:
            self.console.print(f"[bold]answer:[/bold] {_short(ep.get('answer'), 2000)}", highlight=False)
        if ep.get("detail"):
            self.console.print(f"[dim]{_short(ep['detail'], 1000)}[/dim]", highlight=False)
        errors = ", ".join(f"{k} {v}" for k, v in (ep.get("errors") or {}).items() if v) or "none"
        self.console.print(
            f"turns {ep.get('turns')} · model calls {ep.get('model_calls')} · tool calls {ep.get('tool_calls')} "
            f"({ep.get('tool_errors')} failed) · tokens {ep.get('tokens_in')} in / {ep.get('tokens_out')} out · "
            f"{ep.get('wall_s', 0):.2f} s · errors: {errors}", highlight=False)


def _model(spec: str, base_url: str | None) -> Any:
    from ..agent.models import make_model
    from ..agent.trace import ReplayModel

    try:
        if spec.startswith("replay:"):
            return ReplayModel(spec.removeprefix("replay:"))
        return make_model(spec, base_url=base_url)
    except (ValueError, OSError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--model") from None


def _tool_choice(value: str) -> Any:
    return value if value in ("auto", "none", "required") else {"name": value}


def agent_command(
    task: Annotated[str, typer.Argument(help="The task, in words")],
    model: Annotated[str, typer.Option(help="openai:MODEL | anthropic:MODEL | replay:TRACE | scripted:FILE")],
    base_url: Annotated[str | None, typer.Option(help="the provider's base URL (overrides the environment)")] = None,
    mode: Annotated[str, typer.Option(help="code (code actions) or json (function calls)")] = "code",
    tools: Annotated[list[Path] | None, typer.Option("--tools", help="Python file with @tool functions")] = None,
    tool_spec: Annotated[list[Path] | None, typer.Option("--tool-spec", help="JSON list of tool definitions")] = None,
    backend: Annotated[str, typer.Option(help="docker or local")] = "docker",
    trace: Annotated[Path | None, typer.Option(help="write the JSONL trace here")] = None,
    stream: Annotated[bool, typer.Option("--stream", help="stream the model's replies")] = False,
    max_turns: Annotated[int, typer.Option(help="budget: action turns")] = 10,
    max_tokens: Annotated[int, typer.Option(help="budget: input + output tokens")] = 200_000,
    max_wall: Annotated[float, typer.Option(help="budget: wall seconds")] = 300.0,
    max_tool_calls: Annotated[int, typer.Option(help="budget: tool calls")] = 100,
    timeout: Annotated[float, typer.Option(help="seconds per code run")] = 30.0,
    image: Image = None,
    pip: Pip = None,
    tool_choice: Annotated[str, typer.Option(help="json mode, first call: auto|none|required|TOOL")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="steps to stderr; the Episode JSON on stdout")] = False,
) -> None:
    """Run TASK with an agent; each step is shown as it happens. Exit 0 answered, 1 not, 3 sandbox
    unavailable (checked before any model call), 130 interrupted (the episode so far is kept)."""
    from ..agent import Budget, CodeActAgent, FunctionCallingAgent
    from ..runtime.session import Runtime

    if mode not in ("code", "json"):
        raise typer.BadParameter("--mode must be code or json")
    config = sandbox_config(backend, timeout, image=image, pip=pip)
    try:
        budget = Budget(max_turns=max_turns, max_tokens=max_tokens, max_wall_s=max_wall, max_tool_calls=max_tool_calls)
    except ValueError as exc:
        raise typer.BadParameter(_budget_error(exc)) from None
    client = _model(model, base_url)
    with machine_stdout() as out:
        toolset = load_toolset(tools or [], tool_spec or [])
        printer = EventPrinter(Console(file=sys.stderr if as_json else out, highlight=False))
        try:
            check_sandbox(config)  # before the first (paid) model call
            runtime = Runtime(toolset, config)
            agent: CodeActAgent | FunctionCallingAgent
            if mode == "code":
                agent = CodeActAgent(client, toolset, runtime=runtime, budget=budget, trace_path=trace,
                                     stream=stream, on_event=printer)
            else:
                agent = FunctionCallingAgent(client, toolset, runtime=runtime, budget=budget, trace_path=trace,
                                             stream=stream, on_event=printer, tool_choice=_tool_choice(tool_choice))
            with interrupts(agent.interrupt) as stop, runtime:
                episode = agent.run(task)
        except SandboxUnavailable as exc:
            say_unavailable(exc)
            raise typer.Exit(3) from None
        if as_json:
            out.write(episode.model_dump_json() + "\n")
    if episode.status == "error" and episode.detail:
        typer.echo(f"codeact: {episode.stop_reason}: {episode.detail}", err=True)
    if stop.requested:
        raise typer.Exit(EXIT_INTERRUPTED)
    raise typer.Exit(0 if episode.status == "answered" else 1)


def _budget_error(exc: ValueError) -> str:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        flag = "--" + str(err["loc"][0]).replace("_", "-").replace("max-wall-s", "max-wall") if err["loc"] else ""
        return f"{flag}: {err['msg']} (got {err.get('input')!r})"
    return str(exc)


def replay_command(trace: Annotated[Path, typer.Argument(help="a JSONL trace (codeact agent --trace)")]) -> None:
    """Print a trace readably."""
    from ..agent.trace import load_trace

    try:
        events = load_trace(trace)
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="TRACE") from None
    printer = EventPrinter(Console(highlight=False))
    for event in events:
        printer(event)


def register(app: typer.Typer) -> None:
    app.command("agent")(agent_command)
    app.command("replay")(replay_command)
