"""A small tickwarden deployment on a private PostgreSQL, with handles to break it.

Control-plane replicas (`tickwarden serve --no-api`) and workers (`tickwarden
worker`) run as real processes; a webhook receiver runs in a thread and can be told
to fail. Every step of the workload notes in a journal when it starts and ends, so
executions that overlapped can be found afterwards.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg

from tests.execution_helpers import SECRET
from tests.privatepg import PrivatePostgres

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin" / "tickwarden"
LEASE_SECONDS = 6
STEP_SECONDS = 3
HEALTHY = 8  # workflows every minute whose step always succeeds


class Receiver:
    """A webhook endpoint that answers 503 while `failing` is set, and records what it accepted."""

    def __init__(self) -> None:
        self.failing = threading.Event()
        self.accepted: list[dict] = []
        self.refused = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if receiver.failing.is_set():
                    receiver.refused += 1
                    self.send_response(503)
                    self.send_header("Retry-After", "1")
                    self.end_headers()
                    return
                data = json.loads(body)
                receiver.accepted.append({"delivery": self.headers.get("Idempotency-Key") or data.get("delivery"),
                                          "event": data["event"], "alert": data["alert"]["id"],
                                          "thread": data.get("thread")})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@dataclass
class Figures:
    """What one experiment did and what it found."""

    name: str
    trials: int = 0
    faults: int = 0
    ticks: int = 0
    duplicates: int = 0
    lost: int = 0
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"FAULTS {self.name}: {self.trials} trials, {self.faults} faults, {self.ticks} ticks, "
                f"{self.duplicates} duplicates, {self.lost} lost")


class Cluster:
    """Replicas, workers, a receiver and a private database, all in one temporary directory."""

    def __init__(self, root: Path, *, replicas: int = 2, workers: int = 3):
        self.root = root
        self.replicas: dict[str, subprocess.Popen] = {}
        self.workers: dict[str, subprocess.Popen] = {}
        self.receiver: Receiver | None = None
        self.shared: Path | None = None
        self.pg = PrivatePostgres()
        try:
            self._set_up(root, replicas, workers)
        except BaseException:
            self.close()  # a set-up that failed leaves no server, replica or worker running
            raise

    def _set_up(self, root: Path, replicas: int, workers: int) -> None:
        self.receiver = Receiver()
        # Steps run as their environment's own user, not the test's: what they write or
        # look at lives in a directory that user may use.
        self.shared = Path(tempfile.mkdtemp(prefix="tw-faults-"))
        self.shared.chmod(0o1777)
        self.journal = self.shared / "journal.log"
        self.marker = self.shared / "flaky.marker"
        self.env = {**os.environ, "TICKWARDEN_DATABASE_URL": self.pg.url, "TICKWARDEN_SECRET_KEY": SECRET,
                    "TICKWARDEN_DATA_DIR": str(root / "data"), "TICKWARDEN_ALLOW_PRIVATE_URLS": "127.0.0.0/8"}
        self.env.pop("TICKWARDEN_SCHEMA", None)
        self.kills: list[float] = []  # when a worker was killed: its steps die within a second
        self.cli("db", "upgrade")
        (root / "fleet.yaml").write_text(self._fleet())
        self.cli("apply", str(root / "fleet.yaml"))
        self.applied_at = datetime.now(UTC)
        for n in range(replicas):
            self.start_replica(f"s{n}")
        for n in range(workers):
            self.start_worker(f"w{n}")

    def _fleet(self) -> str:
        healthy = "\n".join(
            f"""  - name: h{i:02d}
    environment: default
    publisher: ops@acme.test
    schedule: {{cron: "* * * * *"}}
    timeout_seconds: 30
    steps: [{{name: work, kind: python, call: "tests.steps:journal",
              params: {{path: "{self.journal}", key: h{i:02d}, seconds: {STEP_SECONDS}}}}}]"""
            for i in range(HEALTHY))
        return f"""tenants: [{{name: acme}}]
users: [{{email: ops@acme.test}}]
environments: [{{name: default}}]
channels:
  - {{name: hook, kind: webhook, audience: customer, config: {{url: "{self.receiver.url}", timeout: 2}}}}
workflows:
{healthy}
  - name: flaky
    environment: default
    publisher: ops@acme.test
    schedule: {{cron: "* * * * *"}}
    timeout_seconds: 30
    policy: {{retries: 0, alert_after: 1}}
    steps: [{{name: check, kind: python, call: "tests.steps:fail_while", params: {{marker: "{self.marker}"}}}}]
"""

    # -- processes -----------------------------------------------------------------------

    def cli(self, *args: str) -> str:
        result = subprocess.run([str(BIN), *args], cwd=ROOT, env=self.env, capture_output=True, text=True,
                                timeout=120, check=False)
        assert result.returncode == 0, f"tickwarden {' '.join(args)}: {result.stderr.strip()}"
        return result.stdout

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "a")  # noqa: SIM115 (the process owns it)
        return subprocess.Popen([str(BIN), *args], cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def start_replica(self, name: str) -> None:
        self.replicas[name] = self._spawn(name, "serve", "--no-api", "--replica-id", name)

    def start_worker(self, name: str) -> None:
        self.workers[name] = self._spawn(name, "worker", "--id", name, "--lease", str(LEASE_SECONDS),
                                         "--poll", "0.3", "--grace", "5")

    def kill(self, processes: dict[str, subprocess.Popen], name: str) -> None:
        processes[name].send_signal(signal.SIGKILL)
        processes[name].wait()
        if processes is self.workers:
            self.kills.append(time.time())

    def busy_workers(self) -> list[str]:
        rows = self.query("SELECT DISTINCT worker_id FROM attempts WHERE status = 'running' ORDER BY 1")
        return [r[0] for r in rows if r[0] in self.workers]

    def close(self) -> None:
        if self.shared is not None:
            shutil.rmtree(self.shared, ignore_errors=True)
        for proc in [*self.replicas.values(), *self.workers.values()]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        if self.receiver is not None:
            self.receiver.close()
        self.pg.destroy()

    # -- the database --------------------------------------------------------------------

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        for _ in range(100):  # the test's own reads wait out the outages it causes
            try:
                with psycopg.connect(self.pg.url, connect_timeout=3) as conn:
                    return conn.execute(sql, params).fetchall()
            except psycopg.OperationalError:
                time.sleep(0.3)
        raise AssertionError("the private database did not come back")

    def settle(self, until: datetime, timeout: float = 150.0) -> None:
        """Wait until every run scheduled up to `until` has a verdict and every notification went out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            open_runs = self.query("SELECT count(*) FROM runs WHERE scheduled_for <= %s AND status NOT IN "
                                   "('succeeded', 'failed', 'missed', 'cancelled')", (until,))[0][0]
            unsent = self.query("SELECT count(*) FROM notification_outbox WHERE status <> 'sent'")[0][0]
            if open_runs == 0 and unsent == 0:
                return
            time.sleep(1)
        raise AssertionError(f"runs up to {until} did not settle within {timeout} s")

    # -- the checks ----------------------------------------------------------------------

    def check(self, figures: Figures, start: datetime, end: datetime, *, healthy_only: bool = True) -> None:
        """Count ticks, duplicates and losses of the runs scheduled in [start, end]."""
        workflows = [r[0] for r in self.query("SELECT name FROM workflows ORDER BY name")]
        minutes = _minutes(max(start, self.applied_at + timedelta(seconds=5)), end)
        runs = self.query(
            "SELECT w.name, r.scheduled_for, r.status, r.id FROM runs r JOIN workflows w ON w.id = r.workflow_id "
            "WHERE NOT r.manual AND r.scheduled_for BETWEEN %s AND %s", (start, end))
        seen: dict[tuple[str, datetime], int] = {}
        for name, scheduled_for, status, _ in runs:
            seen[(name, scheduled_for)] = seen.get((name, scheduled_for), 0) + 1
            # A healthy workflow's tick must succeed: a loss to the platform may not cost it the verdict.
            if status != "succeeded" and (name.startswith("h") or not healthy_only):
                figures.lost += 1
                figures.notes.append(f"{name} at {scheduled_for:%H:%M}: {status}")
        for name in workflows:
            for minute in minutes:
                count = seen.get((name, minute), 0)
                figures.ticks += 1
                figures.lost += count == 0
                figures.duplicates += max(count - 1, 0)
                if count != 1:
                    figures.notes.append(f"{name} at {minute:%H:%M}: {count} runs")
        twice = self.query("SELECT run_id FROM attempts a JOIN runs r ON r.id = a.run_id WHERE a.status = 'succeeded' "
                           "AND r.scheduled_for BETWEEN %s AND %s GROUP BY run_id HAVING count(*) > 1", (start, end))
        figures.duplicates += len(twice)
        figures.duplicates += self._overlaps(start)

    def _overlaps(self, since: datetime) -> int:
        """Count executions of one workflow that ran at the same time (a killed step ends with its worker)."""
        if not self.journal.exists():
            return 0
        spans: dict[str, list[list[float]]] = {}
        for line in self.journal.read_text().splitlines():
            what, key, pid, at = line.split()
            if float(at) < since.timestamp() - 60:
                continue
            if what == "start":
                spans.setdefault(key, []).append([float(at), float("inf"), int(pid)])
            else:
                for span in spans.get(key, []):
                    if span[2] == int(pid) and span[1] == float("inf"):
                        span[1] = float(at)
        overlaps = 0
        for key_spans in spans.values():
            for span in key_spans:
                if span[1] == float("inf"):  # killed: it ended with its worker
                    span[1] = min([k for k in self.kills if k >= span[0]] or [span[0] + STEP_SECONDS]) + 1.5
            key_spans.sort()
            overlaps += sum(1 for a, b in itertools.pairwise(key_spans) if b[0] < a[1])
        return overlaps


def _minutes(start: datetime, end: datetime) -> list[datetime]:
    first = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    out = []
    while first <= end:
        out.append(first)
        first += timedelta(minutes=1)
    return out


def wait_until(moment: datetime) -> None:
    time.sleep(max(0.0, (moment - datetime.now(UTC)).total_seconds()))


def next_boundary(lead: float) -> datetime:
    """The next minute boundary at least `lead` seconds away."""
    now = datetime.now(UTC)
    boundary = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return boundary if (boundary - now).total_seconds() >= lead else boundary + timedelta(minutes=1)
