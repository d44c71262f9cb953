"""The engine seam: a client that fails fast, ensure_engine's limits, the doctor report."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from codeact.errors import SandboxUnavailable
from codeact.image import doctor
from codeact.image.engine import docker_client, ensure_engine

NOWHERE = "unix:///nonexistent.sock"


@pytest.fixture
def client() -> Iterator[Any]:
    try:
        c = docker_client()
    except SandboxUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    yield c
    c.close()


def test_unreachable_engine_raises_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NOWHERE)
    with pytest.raises(SandboxUnavailable) as info:
        docker_client(timeout=3)
    message = str(info.value)
    assert "\n" not in message and NOWHERE in message and "ensure-docker.sh" in message


def test_ensure_engine_leaves_a_non_default_host_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NOWHERE)  # never start or install anything for someone else's host
    with pytest.raises(SandboxUnavailable, match="nonexistent"):
        ensure_engine(wait_s=1)


def test_doctor_without_an_engine_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NOWHERE)
    report = doctor()
    assert report["engine"]["ok"] is False and report["engine"]["host"] == NOWHERE
    assert any(item.startswith("engine:") for item in report["missing"])
    assert report["images"]["base"].startswith("codeact-base:")


@pytest.mark.docker
def test_client_answers(client: Any) -> None:
    assert client.ping() is True


@pytest.mark.docker
def test_ensure_engine_returns_a_client_when_one_answers(client: Any) -> None:
    started = ensure_engine(install=False, start=False)
    try:
        assert started.version()["Version"] == client.version()["Version"]
    finally:
        started.close()


@pytest.mark.docker
def test_doctor_reports_the_engine(client: Any) -> None:
    report = doctor(client)
    engine = report["engine"]
    assert engine["ok"] is True and engine["version"] == client.info()["ServerVersion"]
    assert report["cgroup"]["version"] in {"1", "2"} and report["cgroup"]["driver"]
    assert set(report["limits"]) >= {"memory", "swap", "pids", "cpu_quota"}
    assert all(isinstance(v, bool) for v in report["limits"].values())
    assert isinstance(report["images"]["base_present"], bool)
    assert isinstance(report["missing"], list) and all(isinstance(m, str) for m in report["missing"])
