"""A rich progress bar on stderr: done/total, failed, elapsed, ETA, and a free-text status.

Floor 0 (docs/architecture.md): batches (runtime) and experiments (evals) both draw it, and only
when the caller asks for it (``progress=True``); nothing else below the CLI prints.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is slow to import: loaded by the first Bar, not by ``import codeact``
    from rich.console import RenderableType
    from rich.progress import Progress, TaskID

__all__ = ["Bar", "ModeRates"]


class ModeRates:
    """Running success rate per mode, e.g. ``code 6/7 86% · json 5/7 71%``."""

    def __init__(self, modes: Iterable[str]) -> None:
        self.counts = {m: [0, 0] for m in modes}

    def add(self, mode: str, correct: bool) -> None:
        seen = self.counts.setdefault(mode, [0, 0])
        seen[0] += int(correct)
        seen[1] += 1

    def __str__(self) -> str:
        return " · ".join(f"{m} {ok}/{n} {100 * ok / n:.0f}%" if n else f"{m} -"
                          for m, (ok, n) in self.counts.items())


class Bar:
    """``with Bar(total, label, enabled) as bar: bar.advance(failed=..., status=...)``.

    ``failed_label`` names what ``failed`` counts (an experiment's wrong answers, a batch's items
    that did not end ok). The counts, the times and the ETA are never cut: at 80 columns the bar
    and the label give way, and the status goes on its own line below the bar.
    """

    def __init__(self, total: int, label: str, *, enabled: bool = True, completed: int = 0,
                 failed: int = 0, status: str = "", failed_label: str = "failed") -> None:
        self.enabled = enabled
        self.failed = failed
        self._lock = threading.Lock()
        from rich.console import Console
        from rich.markup import escape
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.table import Column

        console = Console(stderr=True)
        # the label and the bar take what is left once the fixed columns (about 40 characters) are laid out
        room = max(20, console.width - 40)
        self._progress = _progress_class()(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}",
                       table_column=Column(no_wrap=True, overflow="ellipsis", max_width=max(10, room - 12))),
            BarColumn(bar_width=max(6, min(40, room - len(label)))),
            MofNCompleteColumn(table_column=Column(no_wrap=True)),
            TextColumn(f"[red]{escape(failed_label)} {{task.fields[failed]}}", table_column=Column(no_wrap=True)),
            TimeElapsedColumn(table_column=Column(no_wrap=True)),
            TextColumn("ETA", table_column=Column(no_wrap=True)),
            TimeRemainingColumn(table_column=Column(no_wrap=True)),
            console=console,
            transient=False,
            disable=not enabled,
        )
        self._task: TaskID = self._progress.add_task(label, total=total, completed=completed,
                                                      failed=failed, status=status)

    def advance(self, *, failed: bool = False, status: str | None = None) -> None:
        with self._lock:
            self.failed += int(failed)
            if status is None:
                self._progress.update(self._task, advance=1, failed=self.failed)
            else:
                self._progress.update(self._task, advance=1, failed=self.failed, status=status)

    def note(self, text: str) -> None:
        """A line on stderr (above the bar when there is one)."""
        self._progress.console.print(text, markup=False, highlight=False)

    def __enter__(self) -> Bar:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()


def _progress_class() -> type[Progress]:
    """``rich.progress.Progress`` drawing each task's status on a line of its own, below the bars."""
    from rich.progress import Progress
    from rich.text import Text

    class _Progress(Progress):
        def get_renderables(self) -> Iterable[RenderableType]:
            yield self.make_tasks_table(self.tasks)
            for task in self.tasks:
                if task.fields.get("status"):
                    yield Text("  " + str(task.fields["status"]), overflow="fold")

    return _Progress
