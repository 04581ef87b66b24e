"""A private PostgreSQL server that a test may stop, restart and kill: never the shared one.

The server binaries refuse to run as root, so the data directory belongs to an
unprivileged user (`nobody`) and every server command runs as that user.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

BIN = Path("/usr/lib/postgresql/15/bin")
USER = "nobody"


def available() -> bool:
    return (BIN / "pg_ctl").exists() and (os.geteuid() != 0 or shutil.which("runuser") is not None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrivatePostgres:
    """One throwaway cluster on a free loopback port, with trust authentication."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tickwarden-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        if os.geteuid() == 0:
            entry = pwd.getpwnam(USER)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        os.chmod(self.root, 0o755)
        self._run(BIN / "initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"port = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.root}'\n"
                       "fsync = off\nmax_connections = 200\n")
        self.start()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *command: object) -> None:
        argv = [str(c) for c in command]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", USER, "--", *argv]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.root)

    def start(self) -> None:
        self._run(BIN / "pg_ctl", "-D", self.data, "-l", self.root / "server.log", "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(BIN / "pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")

    def restart(self, mode: str = "immediate") -> None:
        self.stop(mode)
        self.start()

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass  # already stopped
        shutil.rmtree(self.root, ignore_errors=True)
