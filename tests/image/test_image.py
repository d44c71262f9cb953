"""Offline sandbox images: debootstrap base, FROM builds, tags, labels, pip extras (real engine)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codeact.errors import SandboxUnavailable
from codeact.image import ImageSpec, default_base_tag, ensure_base, ensure_image, image_tag, resolve_python
from codeact.image._context import PythonInfo, dockerfile, pip_platforms
from codeact.image._rootfs import RootfsParams, debian_mirror, strip_rootfs
from codeact.image.engine import ImageNotFound, docker_client
from codeact.kernel.files import KERNEL_FILES

TEST_REPO = "codeact-test-image"
KERNEL = (
    "import sys\nimport protocol\nimport client\n"
    "print('kernel', protocol.NAME, client.NAME, sys.flags.no_user_site)\n"
)


def _kernel_set(root: Path, marker: str = "v1") -> list[Path]:
    (root / "sandbox").mkdir(parents=True, exist_ok=True)
    (root / "stubs").mkdir(exist_ok=True)
    files = {
        "sandbox/kernel.py": KERNEL,
        "sandbox/protocol.py": f"NAME = 'protocol-{marker}'\n",
        "stubs/client.py": "NAME = 'client'\n",
    }
    for rel, text in files.items():
        (root / rel).write_text(text)
    return [root / rel for rel in files]


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    try:
        c = docker_client()
    except SandboxUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    yield c
    built_here = c.images.list(name=TEST_REPO)  # sandbox images first: they are children of the bases
    for image in sorted(built_here, key=lambda i: (i.labels or {}).get("codeact.image") != "1"):
        for ref in image.tags:
            c.images.remove(ref, force=True)
    c.close()


@pytest.fixture(scope="module")
def kernel_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return _kernel_set(tmp_path_factory.mktemp("kernel"))


@pytest.fixture(scope="module")
def built(client: Any, kernel_files: list[Path]) -> str:
    return ensure_image(files=kernel_files, repo=TEST_REPO, client=client)


def _run(client: Any, image: str, cmd: list[str] | None, **kw: Any) -> str:
    out = client.containers.run(image, cmd, network_mode="none", read_only=True, remove=True, **kw)
    return str(out.decode().strip())


# --- no engine needed -------------------------------------------------------------------------


def test_changed_kernel_file_changes_the_tag(tmp_path: Path) -> None:
    files = _kernel_set(tmp_path / "a")
    first = image_tag(ImageSpec(files=tuple(files)))
    assert first == image_tag(ImageSpec(files=tuple(_kernel_set(tmp_path / "b"))))  # same bytes, same tag
    files[1].write_text("NAME = 'protocol-v2'\n")
    assert image_tag(ImageSpec(files=tuple(files))) != first
    assert image_tag(ImageSpec(files=tuple(files), pip=("six",))) != image_tag(ImageSpec(files=tuple(files)))
    assert image_tag(ImageSpec(files=tuple(files), pip=("b", "a"))) == image_tag(
        ImageSpec(files=tuple(files), pip=("a", "b", "a"))
    )


def test_kernel_files_must_have_unique_names_and_exist(tmp_path: Path) -> None:
    files = _kernel_set(tmp_path)
    dup = tmp_path / "other" / "client.py"
    dup.parent.mkdir()
    dup.write_text("")
    with pytest.raises(ValueError, match=r"client\.py"):
        image_tag(ImageSpec(files=(*files, dup)))
    with pytest.raises(SandboxUnavailable, match=r"missing\.py"):
        image_tag(ImageSpec(files=(*files, tmp_path / "missing.py")))


def test_kernel_files_are_flat_unique_names() -> None:
    names = [Path(rel).name for rel in KERNEL_FILES]
    assert len(set(names)) == len(names) and "kernel.py" in names


def test_base_tag_hashes_the_debootstrap_params() -> None:
    assert default_base_tag().startswith("codeact-base:bookworm-")
    assert default_base_tag() == default_base_tag(RootfsParams())
    assert default_base_tag(RootfsParams(include=("python3", "tzdata"))) != default_base_tag()


def test_mirror_is_read_from_apt_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODEACT_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    assert debian_mirror("bookworm", tmp_path) == "http://deb.debian.org/debian"
    (tmp_path / "sources.list").write_text(
        "# comment\ndeb [arch=amd64] http://mirror.example/debian bookworm main\n"
    )
    assert debian_mirror("bookworm", tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://sec.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\n# a note\nURIs: http://deb822.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n"
    )
    assert debian_mirror("bookworm", tmp_path) == "http://deb822.example/debian"
    assert debian_mirror("trixie", tmp_path) == "http://deb.debian.org/debian"


def test_strip_keeps_copyrights_and_adds_the_sandbox_user(tmp_path: Path) -> None:
    for rel in ("usr/share/doc/pkg/copyright", "usr/share/doc/pkg/changelog.gz", "usr/share/man/man1/x.1",
                "var/lib/apt/lists/foo_Packages", "etc/passwd", "etc/group", "etc/resolv.conf"):  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("root:x:0:0::/root:/bin/sh\n" if rel.startswith("etc/") else "x")
    strip_rootfs(tmp_path)
    assert (tmp_path / "usr/share/doc/pkg/copyright").exists()
    assert not (tmp_path / "usr/share/doc/pkg/changelog.gz").exists()
    assert list((tmp_path / "usr/share/man").iterdir()) == []
    assert list((tmp_path / "var/lib/apt/lists").iterdir()) == []
    assert (tmp_path / "etc/resolv.conf").read_text() == ""
    assert "sandbox:x:1000:1000:" in (tmp_path / "etc/passwd").read_text()


def test_dockerfile_has_no_run_and_keeps_sibling_imports() -> None:
    text = dockerfile(
        "base:x", ["kernel.py", "protocol.py"], "/usr/local/bin/python3", site=True, user="1000:1000"
    )
    assert "RUN" not in text and "PYTHONPATH=/opt/codeact/site" in text
    cmd = json.loads(text.split("CMD ", 1)[1])
    assert cmd == ["/usr/local/bin/python3", "-s", "-B", "/opt/codeact/kernel.py"]  # not -I (implies -P)
    assert "PYTHONPATH" not in dockerfile("b", ["kernel.py"], "/usr/bin/python3", site=False, user="1:1")


def test_pip_platforms_follow_the_image_libc() -> None:
    glibc = pip_platforms(PythonInfo("/usr/bin/python3", (3, 11), ("glibc", "2.36"), "x86_64"))
    assert glibc[0] == "manylinux_2_36_x86_64" and "manylinux2014_x86_64" in glibc
    assert "manylinux_2_17_x86_64" in glibc and "manylinux_2_16_x86_64" not in glibc
    assert pip_platforms(PythonInfo("/usr/bin/python3", (3, 12), ("", ""), "aarch64"))[0].startswith(
        "musllinux"
    )


# --- real engine ------------------------------------------------------------------------------


@pytest.mark.docker
def test_second_call_reuses_the_image(client: Any, built: str, kernel_files: list[Path]) -> None:
    first_id = client.images.get(built).id
    messages: list[str] = []
    again = ensure_image(files=kernel_files, repo=TEST_REPO, client=client, progress=messages.append)
    assert again == built and messages == []
    assert client.images.get(again).id == first_id


@pytest.mark.docker
def test_image_runs_stdlib_without_network_as_non_root(client: Any, built: str) -> None:
    code = "import json, sqlite3, asyncio, ssl, os; print('ok', os.getuid())"
    assert _run(client, built, ["python3", "-c", code]) == "ok 1000"
    assert _run(client, built, ["python3", "-c", code], user="65534:65534") == "ok 65534"


@pytest.mark.docker
def test_default_command_runs_the_kernel_with_its_siblings(client: Any, built: str) -> None:
    assert _run(client, built, None) == "kernel protocol-v1 client 1"


@pytest.mark.docker
def test_labels_record_the_interpreter(client: Any, built: str) -> None:
    labels = client.images.get(built).labels
    assert labels["codeact.image"] == "1" and len(labels["codeact.kernel-hash"]) == 16
    assert resolve_python(built, client=client) == "/usr/bin/python3"
    assert labels["codeact.python-version"].startswith("3.")


@pytest.mark.docker
def test_pip_extra_is_importable(client: Any, kernel_files: list[Path]) -> None:
    tag = ensure_image(pip=["six"], files=kernel_files, repo=TEST_REPO, client=client)
    code = "import six; print(six.__file__)"
    assert _run(client, tag, ["python3", "-c", code]).startswith("/opt/codeact/site/six.py")
    assert json.loads(client.images.get(tag).labels["codeact.pip"]) == ["six"]


@pytest.mark.docker
def test_missing_base_image_is_unavailable_and_never_pulled(client: Any, kernel_files: list[Path]) -> None:
    with pytest.raises(SandboxUnavailable, match="not present locally"):
        ensure_image(base="codeact-no-such-image:nope", files=kernel_files, repo=TEST_REPO, client=client)
    with pytest.raises(ImageNotFound):
        client.images.get("codeact-no-such-image:nope")


@pytest.mark.docker
def test_custom_base_python_path_is_detected(client: Any, kernel_files: list[Path]) -> None:
    base = f"{TEST_REPO}:local-python"
    recipe = f"FROM {ensure_base(client=client)}\nRUN ln -s /usr/bin/python3 /usr/local/bin/python3\n"
    client.images.build(fileobj=io.BytesIO(recipe.encode()), tag=base, network_mode="none", rm=True)
    tag = ensure_image(base=base, files=kernel_files, repo=TEST_REPO, client=client)
    assert resolve_python(tag, client=client) == "/usr/local/bin/python3"
    assert client.images.get(tag).labels["codeact.base"] == base
    assert _run(client, tag, None) == "kernel protocol-v1 client 1"


@pytest.mark.docker
def test_unknown_image_has_no_python(client: Any) -> None:
    with pytest.raises(SandboxUnavailable, match="not present"):
        resolve_python(f"{TEST_REPO}:absent", client=client)


@pytest.mark.docker
def test_default_image_builds_once(client: Any) -> None:
    tag = ensure_image(client=client)
    image_id = client.images.get(tag).id
    assert ensure_image(client=client) == tag and client.images.get(tag).id == image_id
    assert _run(client, tag, ["python3", "-c", "import protocol, client, kernel; print('ok')"],
                working_dir="/opt/codeact") == "ok"  # fmt: skip


@pytest.mark.docker
@pytest.mark.slow
def test_numpy_wheel_works(client: Any, kernel_files: list[Path]) -> None:
    tag = ensure_image(pip=["numpy"], files=kernel_files, repo=TEST_REPO, client=client)
    code = "import numpy as np; print(int(np.arange(10).sum()))"
    assert _run(client, tag, ["python3", "-c", code]) == "45"


@pytest.mark.docker
def test_concurrent_builds_build_once(client: Any, tmp_path: Path) -> None:
    files = _kernel_set(tmp_path, marker="concurrent")
    script = (
        "import sys\nfrom codeact.image import ensure_image\n"
        f"print(ensure_image(files=sys.argv[1:], repo={TEST_REPO!r}, progress=lambda m: print('>', m)))\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, *map(str, files)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=240)[0].splitlines() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outputs[0][-1] == outputs[1][-1]
    builds = [line for out in outputs for line in out if line.startswith("> building")]
    assert len(builds) == 1


def test_prune_keeps_the_newest_and_spares_images_in_use(client: Any, tmp_path: Path) -> None:
    from codeact.image import prune_images

    repo = "codeact-test-prune"
    tags = []
    for i in range(3):
        tags.append(ensure_image(files=_kernel_set(tmp_path / f"k{i}", marker=f"prune{i}"), repo=repo, client=client))
        time.sleep(1.1)  # image creation times have one-second resolution
    used = client.api.create_container(tags[0], command=["true"])  # the oldest, in use by a container
    try:
        report = prune_images(client, repo=repo, keep=1)
        assert report.kept == [tags[2]] and report.removed == [tags[1]] and report.in_use == [tags[0]]
        assert prune_images(client, repo=repo, keep=0, min_age_s=3600).removed == []  # all too young
    finally:
        client.api.remove_container(used["Id"], force=True)
    assert prune_images(client, repo=repo, keep=0).removed == [tags[2], tags[0]]
    assert client.images.list(name=repo) == []
