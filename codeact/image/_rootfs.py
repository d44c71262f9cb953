"""Build a minimal Debian root filesystem with debootstrap and pack it as a tarball.

Host-side only; no Docker here. The network is touched only by ``apt-get`` / ``debootstrap``,
and only towards the Debian mirror apt already uses.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from codeact.errors import SandboxUnavailable

Progress = Callable[[str], None]

#: Bump when the strip recipe or the rootfs layout changes: a new base tag follows.
ROOTFS_FORMAT = 1
FALLBACK_MIRROR = "http://deb.debian.org/debian"
SANDBOX_UID = 1000

#: Paths (relative to the rootfs) whose *contents* are removed to keep the image small.
_EMPTY_DIRS = (
    "var/lib/apt/lists",
    "var/cache/apt",
    "var/cache/debconf",
    "var/log",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "tmp",
    "root",
)
_TAR_EXCLUDES = ("./proc/*", "./sys/*", "./dev/*", "./run/*")


@dataclass(frozen=True)
class RootfsParams:
    """What debootstrap is asked for; the base image tag is a hash of these."""

    suite: str = "bookworm"
    variant: str = "minbase"
    include: tuple[str, ...] = ("python3",)
    arch: str = ""  # "" = the host's dpkg architecture

    def resolved(self) -> RootfsParams:
        return self if self.arch else RootfsParams(self.suite, self.variant, self.include, host_arch())

    def digest(self) -> str:
        data = {**asdict(self.resolved()), "format": ROOTFS_FORMAT}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def host_arch() -> str:
    """The host's Debian architecture name (amd64, arm64, ...)."""
    try:
        out = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        machine = os.uname().machine
        return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def debian_mirror(suite: str = "bookworm", apt_dir: Path = Path("/etc/apt")) -> str:
    """The mirror apt uses for ``suite`` (deb822 ``URIs:`` or a ``deb`` line), else deb.debian.org."""
    override = os.environ.get("CODEACT_DEBIAN_MIRROR")
    if override:
        return override
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        for stanza in _read(path).split("\n\n"):
            fields = _deb822(stanza)
            if suite in fields.get("suites", "").split() and "deb" in fields.get("types", "").split():
                uris = fields.get("uris", "").split()
                if uris:
                    return uris[0]
    lists = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for path in lists:
        for line in _read(path).splitlines():
            words = [w for w in line.split("#", 1)[0].split() if not w.startswith("[")]
            if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                return words[1]
    return FALLBACK_MIRROR


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _deb822(stanza: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in stanza.splitlines():
        if line.startswith("#") or ":" not in line or line[:1].isspace():
            continue
        key, value = line.split(":", 1)
        fields[key.strip().lower()] = value.strip()
    return fields


def ensure_debootstrap(progress: Progress) -> str:
    """Path of debootstrap; installs it with apt-get when missing and we are root."""
    found = shutil.which("debootstrap") or _sbin("debootstrap")
    if found:
        return found
    if os.geteuid() != 0:
        raise SandboxUnavailable(
            "building the sandbox base image needs debootstrap and root; run once as root, "
            "or pass base=IMAGE of a local image with python3"
        )
    progress("installing debootstrap with apt-get ...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "debootstrap"]
    if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["?"])[-1]
            raise SandboxUnavailable(f"apt-get install debootstrap failed: {tail}")
    found = shutil.which("debootstrap") or _sbin("debootstrap")
    if not found:
        raise SandboxUnavailable("debootstrap is still missing after apt-get install")
    return found


def _sbin(name: str) -> str | None:
    for d in ("/usr/sbin", "/sbin"):
        if os.access(f"{d}/{name}", os.X_OK):
            return f"{d}/{name}"
    return None


def build_rootfs_tar(params: RootfsParams, out: Path, progress: Progress) -> Path:
    """debootstrap ``params`` into a scratch dir next to ``out``, strip it, tar it to ``out``."""
    params = params.resolved()
    tool = ensure_debootstrap(progress)
    if os.geteuid() != 0:
        raise SandboxUnavailable("debootstrap needs root; run the first build as root or pass base=IMAGE")
    root = out.with_name(out.name + ".rootfs")
    log = out.with_name(out.name + ".log")
    _remove_tree(root)
    mirror = debian_mirror(params.suite)
    cmd = [
        tool, f"--variant={params.variant}", f"--include={','.join(params.include)}",
        f"--arch={params.arch}", params.suite, str(root), mirror,
    ]  # fmt: skip
    progress(f"debootstrap {params.suite} ({params.variant}, +{','.join(params.include)}) from {mirror} ...")
    try:
        with log.open("wb") as fh:
            code = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
        if code != 0:
            tail = (_read(log).strip().splitlines() or ["?"])[-1]
            raise SandboxUnavailable(f"debootstrap failed ({code}): {tail} (log: {log})")
        progress("stripping the root filesystem ...")
        strip_rootfs(root)
        progress("packing the root filesystem ...")
        tmp = out.with_name(out.name + ".part")
        tar = ["tar", "--numeric-owner", "-C", str(root), "-cf", str(tmp)]
        tar += [f"--exclude={p}" for p in _TAR_EXCLUDES] + ["."]
        done = subprocess.run(tar, capture_output=True, text=True)
        if done.returncode != 0:
            raise SandboxUnavailable(f"tar of the root filesystem failed: {done.stderr.strip()[:200]}")
        tmp.replace(out)
    finally:
        _remove_tree(root)
    log.unlink(missing_ok=True)
    return out


def strip_rootfs(root: Path) -> None:
    """Remove what a sandbox never needs: apt lists, caches, docs (not copyrights), man, locales."""
    for rel in _EMPTY_DIRS:
        _empty(root / rel)
    doc = root / "usr/share/doc"
    if doc.is_dir():
        for pkg in doc.iterdir():
            if pkg.is_dir() and not pkg.is_symlink():
                for item in pkg.iterdir():
                    if item.name != "copyright":
                        _delete(item)
            else:
                _delete(pkg)
    for stale in (root / "var/lib/dpkg").glob("*-old"):
        _delete(stale)
    resolv = root / "etc/resolv.conf"
    if resolv.exists() or resolv.is_symlink():
        _delete(resolv)
        resolv.write_text("")
    _add_user(root, SANDBOX_UID)


def _add_user(root: Path, uid: int) -> None:
    """A passwd/group entry for the non-root sandbox user (home /workspace, no shell)."""
    passwd, group = root / "etc/passwd", root / "etc/group"
    if f":{uid}:" not in _read(passwd):
        with passwd.open("a") as fh:
            fh.write(f"sandbox:x:{uid}:{uid}:codeact sandbox:/workspace:/usr/sbin/nologin\n")
    if f":{uid}:" not in _read(group):
        with group.open("a") as fh:
            fh.write(f"sandbox:x:{uid}:\n")


def _empty(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        for item in path.iterdir():
            _delete(item)


def _delete(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve()) + "/"
    points: Iterable[str] = (line.split()[1] for line in _read(Path("/proc/mounts")).splitlines() if line)
    return sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)


def _remove_tree(root: Path) -> None:
    """Unmount whatever debootstrap left mounted inside ``root``, then delete it."""
    if not root.exists():
        return
    for point in _mounts_under(root):
        subprocess.run(["umount", "-l", point], capture_output=True)
    if _mounts_under(root):
        raise SandboxUnavailable(f"cannot clean {root}: something is still mounted inside it")
    shutil.rmtree(root)
