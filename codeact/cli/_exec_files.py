"""``codeact exec``'s files: ``--put``/``--get`` through ``Session.files``, and the lock that lets
parallel invocations share one ``--session`` file without losing each other's cells."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from .._text import one_line
from ..errors import WorkspaceFileError

#: ``--put``: (workspace path, bytes read from the local file before anything starts).
Put = tuple[str, bytes]
#: ``--get``: (workspace path, local path written after the run).
Get = tuple[str, Path]


def parse_puts(values: list[str]) -> list[Put]:
    """``LOCAL:REMOTE`` each (split at the last ``:``), the local files read now: a missing one is
    a usage error before any sandbox starts."""
    puts = []
    for value in values:
        local, sep, remote = value.rpartition(":")
        if not sep or not local or not remote:
            raise typer.BadParameter(f"{value!r} is not LOCAL:REMOTE", param_hint="--put")
        try:
            puts.append((remote, Path(local).read_bytes()))
        except OSError as exc:
            raise typer.BadParameter(f"cannot read {local}: {exc.strerror or exc}", param_hint="--put") from None
    return puts


def parse_gets(values: list[str]) -> list[Get]:
    """``REMOTE:LOCAL`` each (split at the first ``:``)."""
    gets = []
    for value in values:
        remote, sep, local = value.partition(":")
        if not sep or not local or not remote:
            raise typer.BadParameter(f"{value!r} is not REMOTE:LOCAL", param_hint="--get")
        gets.append((remote, Path(local)))
    return gets


def put_files(session: Any, puts: list[Put]) -> None:
    """Write the ``--put`` files into the workspace; a refused one is a usage error (exit 2)."""
    for remote, data in puts:
        try:
            session.files.write(remote, data)
        except WorkspaceFileError as exc:
            typer.echo(f"codeact: --put {remote}: {one_line(str(exc), 300)}", err=True)
            raise typer.Exit(2) from None


def get_files(session: Any, gets: list[Get]) -> str | None:
    """Copy the ``--get`` files out of the workspace; the first failure's line, else None."""
    for remote, local in gets:
        try:
            data = session.files.read(remote)
            local.write_bytes(data)
        except WorkspaceFileError as exc:
            return f"codeact: --get {remote}: {one_line(str(exc), 300)}"
        except OSError as exc:
            return f"codeact: --get {remote}: cannot write {local}: {exc.strerror or exc}"
    return None


@contextlib.contextmanager
def session_lock(path: Path | None) -> Iterator[None]:
    """Hold ``PATH.lock`` (``flock``, exclusive) from before the session is restored from ``path``
    to after it is saved again, so that invocations sharing the file take turns. (The snapshot
    itself is replaced by a rename at each save, so the lock lives beside it.) Where the lock
    cannot be made, nor can the session be saved: the run goes on unlocked, and the save says why."""
    if path is None:
        yield
        return
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError:  # no place for it (a missing directory, say): nor for the save, which says so
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            typer.echo(f"codeact: waiting for another codeact using {path}", err=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
