"""What an environment process is given: an empty environment, its own directory, its own user.

A customer's process must not inherit the worker's variables (the platform's database
URL, its signing key), share a working directory with another environment, or read
the worker's files and `/proc/<worker>/environ`. Two modes:

- the worker runs as root: each environment runs as its own unprivileged uid and gid
  (`TICKWARDEN_ENVIRONMENT_UID_BASE` + environment id, default base 1,000,000; or one
  configured `TICKWARDEN_ENVIRONMENT_USER`), with no supplementary groups, umask 077, in
  a directory only it can enter. The kernel then refuses it the worker's
  `/proc/<pid>/environ`, the 0600 key file and the 0700 data directory.
- the worker runs unprivileged: the process still starts with an empty environment and
  its own directory, but shares the worker's uid, so files the worker can read, it can
  read. Use this mode only where every tenant is trusted (see docs/security.md).
"""

from __future__ import annotations

import os
import pwd
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tickwarden.models import Environment

BASE_ENV = "TICKWARDEN_ENVIRONMENTS_DIR"
USER_ENV = "TICKWARDEN_ENVIRONMENT_USER"
UID_BASE_ENV = "TICKWARDEN_ENVIRONMENT_UID_BASE"
UID_BASE = 1_000_000
PATH = "/usr/local/bin:/usr/bin:/bin"
LANG = "C.UTF-8"


class SandboxError(Exception):
    """The environment's directory or user cannot be set up safely."""


@dataclass(frozen=True)
class Sandbox:
    cwd: str
    uid: int | None
    gid: int | None
    env: dict[str, str]


def _base(environ: Mapping[str, str]) -> Path:
    configured = environ.get(BASE_ENV, "").strip()
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"tickwarden-environments-{os.geteuid()}"


def _user(environment: Environment, environ: Mapping[str, str]) -> tuple[int, int] | tuple[None, None]:
    if os.geteuid() != 0:
        return None, None
    configured = environ.get(USER_ENV, "").strip()
    if configured:
        try:
            entry = pwd.getpwnam(configured) if not configured.isdigit() else pwd.getpwuid(int(configured))
        except KeyError:
            raise SandboxError(f"the environment user {configured!r} does not exist") from None
        if entry.pw_uid == 0:
            raise SandboxError("the environment user must not be root")
        return entry.pw_uid, entry.pw_gid
    try:
        base = int(environ.get(UID_BASE_ENV, "") or UID_BASE)
    except ValueError:
        raise SandboxError(f"{UID_BASE_ENV} is not a number") from None
    uid = base + environment.id
    if base < 1000 or uid >= 2**31:
        raise SandboxError(f"{UID_BASE_ENV} puts environment uids outside 1000 … 2^31")
    return uid, uid


def _own_directory(path: Path, mode: int, owners: tuple[int | None, ...] = ()) -> None:
    """Create `path`, or accept it only if it is a real directory owned by this process's user.

    The default base lives in a world-writable /tmp: a directory or symlink planted
    there by someone else must not become the root of every environment.
    """
    try:
        path.mkdir(mode=mode)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid not in (os.geteuid(), *owners):
        raise SandboxError(f"{path} is not a directory owned by the worker's user")
    os.chmod(path, mode)


def prepare(environment: Environment, settings_env: object = None,
            environ: Mapping[str, str] | None = None) -> Sandbox:
    """Create the environment's directory and return how to start its process."""
    environ = os.environ if environ is None else environ
    uid, gid = _user(environment, environ)
    base = _base(environ)
    _own_directory(base, 0o711)  # others may enter their own subdirectory, not list the rest
    home = base / f"{environment.tenant_id}-{environment.id}"
    _own_directory(home, 0o700, (uid,))
    if uid is not None and gid is not None:
        os.chown(home, uid, gid, follow_symlinks=False)
    env = {"PATH": PATH, "HOME": str(home), "LANG": LANG, "TMPDIR": str(home)}
    if isinstance(settings_env, dict):
        # The tenant's own, non-secret settings; nothing may pose as tickwarden's variables.
        env.update({str(k): str(v) for k, v in settings_env.items()
                    if not str(k).upper().startswith("TICKWARDEN_") and str(k) not in env})
    env["TICKWARDEN_TENANT_ID"] = str(environment.tenant_id)
    return Sandbox(str(home), uid, gid, env)
