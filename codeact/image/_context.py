"""Pieces of the final image build: probing a base's Python, pip wheels, the build context."""

from __future__ import annotations

import io
import json
import os
import py_compile
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from codeact.errors import SandboxUnavailable

KERNEL_DIR = "/opt/codeact"
SITE_DIR = f"{KERNEL_DIR}/site"

_PROBE = (
    "import json, platform, sys; "
    "print(json.dumps({'executable': sys.executable, 'version': list(sys.version_info[:2]), "
    "'libc': list(platform.libc_ver()), 'machine': platform.machine()}))"
)


@dataclass(frozen=True)
class PythonInfo:
    """The interpreter a base image runs ``python3`` with."""

    executable: str
    version: tuple[int, int]
    libc: tuple[str, str]
    machine: str

    @property
    def version_str(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"


def probe_python(client: Any, image: str) -> PythonInfo:
    """Run ``python3`` in ``image`` (network none, removed after) and report what it is."""
    container = client.containers.create(image, ["python3", "-c", _PROBE], network_mode="none")
    try:
        container.start()
        status = container.wait(timeout=120)
        out = container.logs(stdout=True, stderr=True).decode(errors="replace").strip()
    except Exception as exc:
        raise SandboxUnavailable(f"cannot run python3 in base image {image!r}: {exc}") from exc
    finally:
        container.remove(force=True)
    if status.get("StatusCode") != 0:
        last = (out.splitlines() or ["no output"])[-1]
        raise SandboxUnavailable(f"base image {image!r} has no working python3 on PATH: {last}")
    data = json.loads(out.splitlines()[-1])
    major, minor = data["version"]
    return PythonInfo(data["executable"], (major, minor), tuple(data["libc"]), data["machine"])


def pip_platforms(info: PythonInfo) -> list[str]:
    """Wheel platform tags the image's Python accepts (manylinux up to its glibc, or musllinux)."""
    arch = info.machine or os.uname().machine
    lib, ver = info.libc
    if lib == "glibc" and ver:
        top = int(ver.split(".")[1])
        tags = [f"manylinux_2_{n}_{arch}" for n in range(top, 16, -1)]
        return [*tags, f"manylinux2014_{arch}"]
    return [f"musllinux_1_2_{arch}", f"musllinux_1_1_{arch}"]


def pip_install(packages: Sequence[str], target: Path, info: PythonInfo) -> None:
    """Install binary wheels for the image's Python/platform into ``target`` with the host's pip."""
    cmd = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input",
        "--target", str(target), "--only-binary=:all:", "--no-compile", "--implementation", "cp",
        "--python-version", info.version_str,
    ]  # fmt: skip
    for tag in pip_platforms(info):
        cmd += ["--platform", tag]
    done = subprocess.run([*cmd, *packages], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()] or ["?"]
        raise SandboxUnavailable(f"pip could not fetch {' '.join(packages)} for Python "
                                 f"{info.version_str}: {lines[-1].strip()}")  # fmt: skip
    shutil.rmtree(target / "bin", ignore_errors=True)  # console scripts name the host's Python


def dockerfile(base: str, names: Sequence[str], python: str, *, site: bool, user: str,
               bytecode: bool = False) -> str:
    """The final image: the base plus the kernel files (their bytecode, and wheels); no RUN steps."""
    lines = [f"FROM {base}", f"COPY {' '.join(names)} {KERNEL_DIR}/"]
    if bytecode:
        lines.append(f"COPY __pycache__/ {KERNEL_DIR}/__pycache__/")
    env = ["PYTHONDONTWRITEBYTECODE=1"]
    if site:
        lines.append(f"COPY site/ {SITE_DIR}/")
        env.append(f"PYTHONPATH={SITE_DIR}")
    lines += [
        f"ENV {' '.join(env)}",
        "WORKDIR /workspace",
        f"USER {user}",
        # -s -B, not -I: -I implies -P, which drops the script's directory from sys.path, and the
        # kernel imports its siblings (protocol, client) as top-level modules.
        f'CMD ["{python}", "-s", "-B", "{KERNEL_DIR}/kernel.py"]',
    ]
    return "\n".join(lines) + "\n"


def kernel_bytecode(files: dict[str, bytes], info: PythonInfo) -> dict[str, bytes]:
    """``__pycache__/NAME.TAG.pyc`` for each kernel file, compiled by this Python for the image's,
    when both are the same CPython version (else none: the image compiles them at each start).
    Checked-hash files: the image's Python uses one only while its source is unchanged, whatever
    the files' times, and ``-B`` never writes one (its root is read-only anyway)."""
    if (sys.implementation.name, sys.version_info[:2]) != ("cpython", info.version):
        return {}
    tag = sys.implementation.cache_tag
    out: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="codeact-pyc-") as tmp:
        for name, source in files.items():
            if not name.endswith(".py"):
                continue
            src, pyc = Path(tmp) / name, Path(tmp) / f"{name}c"
            src.write_bytes(source)
            py_compile.compile(str(src), cfile=str(pyc), dfile=f"{KERNEL_DIR}/{name}", doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
            out[f"__pycache__/{name[:-3]}.{tag}.pyc"] = pyc.read_bytes()
    return out


def write_context(out: IO[bytes], docker_file: str, files: dict[str, bytes], site: Path | None) -> None:
    """A tar build context: Dockerfile, kernel files flat, ``site/`` tree; root-owned, world-readable."""
    with tarfile.open(fileobj=out, mode="w") as tar:
        _add_bytes(tar, "Dockerfile", docker_file.encode())
        for name, data in files.items():
            _add_bytes(tar, name, data)
        if site is not None:
            tar.add(str(site), arcname="site", filter=_normalize)
    out.seek(0)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def _normalize(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    executable = info.isdir() or info.mode & 0o111
    info.mode = 0o755 if executable else 0o644
    return info
