"""The results as a terminal table (rich), as JSON files, and as the table in docs/benchmarks.md."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

SCHEMA = 1
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
COLUMNS = ["measure", "codeact median", "p90", "baseline(s)", "ratio", "target", "met?"]


def machine_info() -> dict[str, Any]:
    """Cores, memory, OS, Python and the Docker engine, for the JSON header."""
    mem_kib = 0
    try:
        mem_kib = int(Path("/proc/meminfo").read_text().split("\n")[0].split()[1])
    except (OSError, ValueError, IndexError):
        pass
    docker = None
    try:
        out = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True,
                             text=True, timeout=20)
        docker = out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"cores": os.cpu_count(), "memory_gib": round(mem_kib / 1024 / 1024, 1),
            "platform": platform.platform(), "python": sys.version.split()[0],
            "python_implementation": platform.python_implementation(), "docker": docker,
            "loadavg_1m": round(os.getloadavg()[0], 2)}


def running_containers() -> int | None:
    """Containers running right now (other sessions' tests share this engine and these 2 cores)."""
    try:
        out = subprocess.run(["docker", "ps", "-q"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return len(out.stdout.split()) if out.returncode == 0 else None


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "µs":
        return f"{value:,.0f} µs"
    if unit == "ms":
        return f"{value:,.2f} ms" if value < 10 else f"{value:,.0f} ms"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "MiB":
        return f"{value:.1f} MiB"
    if unit == "actions/s":
        return f"{value:,.0f} /s"
    return f"{value:,.0f} {unit}".strip()


def _baselines(row: dict[str, Any]) -> list[str]:
    cells = []
    for b in row["baselines"]:
        if b["median"] is None:
            cells.append(f"{b['name']}: {b['note'] or 'n/a'}")
            continue
        text = f"{b['name']}: {fmt(b['median'], row['unit'])}"
        if b["p90"] is not None:
            text += f" (p90 {fmt(b['p90'], row['unit'])})"
        cells.append(text)
    return cells


def _met(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return str(row["status"])
    return "—" if row["met"] is None else ("yes" if row["met"] else "NO")


def cells(row: dict[str, Any]) -> list[str]:
    """The row as text cells, in COLUMNS order."""
    if row["status"] != "ok":
        return [row["measure"], f"{row['status']}: {row['note']}", "", "", "", row["target"], row["status"]]
    ratio = f"{row['ratio']:.2f}{row['ratio_label']}" if row["ratio"] is not None else "—"
    return [row["measure"], fmt(row["median"], row["unit"]),
            fmt(row["p90"], row["unit"]) if row["p90"] is not None else "—",
            "\n".join(_baselines(row)) or "—", ratio, row["target"], _met(row)]


def print_table(data: dict[str, Any], console: Console) -> None:
    table = Table(title=f"codeact benchmarks ({data['mode']}, {data['duration_s']:.0f} s)", show_lines=True)
    for name in COLUMNS:
        table.add_column(name, overflow="fold")
    styles = {"yes": "green", "NO": "bold red"}
    for row in data["measures"]:
        c = cells(row)
        c[-1] = f"[{styles[c[-1]]}]{c[-1]}[/]" if c[-1] in styles else c[-1]
        table.add_row(*c)
    console.print(table)
    for row in data["measures"]:
        if row["note"] and row["status"] == "ok":
            console.print(f"[dim]• {row['measure']}: {row['note']}[/]")


def markdown(data: dict[str, Any]) -> str:
    """The benchmark section of docs/benchmarks.md (between the markers), generated from the JSON."""
    m = data["machine"]

    def esc(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", "<br>")

    lines = [
        f"Measured {data['finished_at']} by `make bench` ({data['duration_s']:.0f} s) on {m['cores']} cores, "
        f"{m['memory_gib']} GiB, Docker {m['docker'] or 'n/a'}, Python {m['python']} (load average "
        f"{data.get('loadavg_start', '?')} at the start, {m.get('loadavg_1m', '?')} at the end; "
        f"{data.get('containers_at_start', '?')} other containers running at the start). Ratios are against "
        "baselines measured in the same run; the \"transport floor\" is a raw JSON ping-pong / exec loop with a "
        "process in a container from the sandbox image with the same hardening and the same kind of Unix socket "
        "(no codeact code on either side, `benchmarks/floor.py`); \"local kernel\" is the same codeact kernel as "
        "a local subprocess (`SandboxConfig(backend=\"local\", policy=\"none\")`).",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(esc(c) for c in cells(row)) + " |" for row in data["measures"]]
    met = [r for r in data["measures"] if r["met"] is not None and r["status"] == "ok"]
    lines += ["", f"Targets met: {sum(1 for r in met if r['met'])} of {len(met)}.", ""]
    lines += [f"- {esc(r['measure'])}: {esc(r['note'])}" for r in data["measures"] if r["note"]]
    lines.append("\nRaw numbers: `benchmarks/results/latest.json`.")
    return "\n".join(lines)


def write_json(data: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(data["started_epoch"]))
    path = out_dir / f"bench-{stamp}.json"
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    path.write_text(text)
    (out_dir / "latest.json").write_text(text)
    return path


def update_table(data: dict[str, Any], doc: Path) -> bool:
    """Rewrite only what is between the markers of ``doc``; False if the markers are missing."""
    text = doc.read_text()
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        return False
    section = f"{START}\n{markdown(data)}\n{END}"
    doc.write_text(pattern.sub(lambda _m: section, text, count=1))
    return True
