"""``codeact doctor``, ``codeact image build``, ``codeact cleanup``."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

image_app = typer.Typer(help="Build sandbox images (offline: debootstrap or a local base image).")


@image_app.command("build")
def image_build(
    base: Annotated[str | None, typer.Option("--base", help="a local image with python3 to build FROM")] = None,
    pip: Annotated[list[str] | None, typer.Option("--pip", help="a package to bake in (repeatable)")] = None,
    force: Annotated[bool, typer.Option(help="rebuild even if the tag exists")] = False,
) -> None:
    """Build (or reuse) the sandbox image; prints its tag."""
    from ..image import ImageSpec, build_image, ensure_image

    def say(message: str) -> None:
        typer.echo(f"codeact: {message}", err=True)

    if force:
        tag = build_image(ImageSpec(base=base, pip=tuple(pip or ())), progress=say)
    else:
        tag = ensure_image(base=base, pip=pip or (), progress=say)
    typer.echo(tag)


@image_app.command("prune")
def image_prune(
    keep: Annotated[int, typer.Option("--keep", help="how many of the newest sandbox images to keep")] = 5,
) -> None:
    """Remove old codeact-sandbox images (those a container uses are kept)."""
    from ..image import prune_images
    from ..image.engine import docker_client

    report = prune_images(docker_client(), keep=keep)
    typer.echo(f"removed {len(report.removed)}, kept {len(report.kept)}, in use {len(report.in_use)}")


def doctor(as_json: Annotated[bool, typer.Option("--json", help="the report as one JSON object (for "
                                                                  "programs)")] = False) -> None:
    """Report the Docker engine, the image, cgroup limit support and what is missing (exit 3 when
    something is)."""
    from ..image import doctor as run_doctor
    from ..sandbox.local import isolation_report as local_isolation

    report = run_doctor()
    report["local_isolation"] = local_isolation()
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
        return
    for line in _readable(report):
        typer.echo(line)
    if report.get("missing"):
        raise typer.Exit(3)


def _readable(report: dict[str, Any], indent: str = "") -> list[str]:
    """The report as aligned ``name: value`` lines, nested ones indented; yes/no, lists joined."""
    width = max((len(k) for k in report), default=0) + 1
    lines = []
    for key, value in report.items():
        label = f"{indent}{key.replace('_', ' ') + ':':<{width}}"
        if isinstance(value, dict) and value:
            lines += [label.rstrip(), *_readable(value, indent + "  ")]
        else:
            lines.append(f"{label} {_word(value)}")
    return lines


def _word(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None or value == [] or value == {}:
        return "none"
    if isinstance(value, list):
        return ", ".join(_word(v) for v in value)
    return str(value)


def cleanup(everything: Annotated[bool, typer.Option("--all", help="also this user's LIVE sessions (of "
                                                                   "other running processes)")] = False) -> None:
    """Remove containers and session directories left by dead codeact processes.

    Exit 3 when no Docker engine answers (the session directories are still removed)."""
    from ..errors import SandboxUnavailable
    from ..image.engine import docker_client
    from ..sandbox.cleanup import cleanup_stale
    from ._options import say_unavailable
    from ._output import plural

    try:
        client = docker_client()
    except SandboxUnavailable as exc:
        report = cleanup_stale(None, everything=everything)
        typer.echo(f"removed {plural(len(report.directories), 'session directory', 'session directories')}; "
                   "containers not checked", err=True)
        say_unavailable(exc)
        raise typer.Exit(3) from None
    report = cleanup_stale(client, everything=everything)
    typer.echo(f"removed {plural(len(report.containers), 'container')}, "
               f"{plural(len(report.directories), 'session directory', 'session directories')}")


def register(app: typer.Typer) -> None:
    app.add_typer(image_app, name="image")
    app.command("doctor")(doctor)
    app.command("cleanup")(cleanup)
