"""The execution protocol itself: every request carries the environment's credential, bound to its connection."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from tickwarden.environments import EnvironmentFailed, EnvironmentProcess
from tickwarden.environments.client import Aborted, ExecutionClient
from tickwarden.environments.runner import envelope, opened, read_line


@pytest.fixture
def process():
    proc = EnvironmentProcess(1)
    yield proc
    proc.kill()


def _raw(process: EnvironmentProcess) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(process.client.target)
    return sock


def _greeted_ping(process: EnvironmentProcess, sock: socket.socket) -> tuple[bytearray, str, bytes]:
    """Read the greeting on a raw connection and send a ping signed with its challenge: (buffer, challenge, request)."""
    buffer = bytearray()
    challenge = json.loads(read_line(sock, time.monotonic() + 5, buffer))["challenge"]
    recorded = envelope(process.client.credential, "request", challenge, {"op": "ping"})
    sock.sendall(recorded)
    return buffer, challenge, recorded


def test_a_request_signed_with_another_credential_is_refused(process):
    stranger = ExecutionClient(process.client.address, os.urandom(32))
    with pytest.raises(EnvironmentFailed, match="refused the request's credential"):
        stranger.call({"op": "ping"}, 5)
    assert process.alive() and process.call({"op": "ping"}, 5)["ok"]


def test_a_recorded_request_cannot_be_replayed_on_another_connection(process):
    first = _raw(process)
    buffer, challenge, recorded = _greeted_ping(process, first)
    assert b'"body"' in read_line(first, time.monotonic() + 5, buffer)
    first.close()
    second = _raw(process)
    buffer = bytearray()
    read_line(second, time.monotonic() + 5, buffer)  # a fresh challenge
    second.sendall(recorded)
    answer = json.loads(read_line(second, time.monotonic() + 5, buffer))
    second.close()
    assert "credential" in answer["error"] and "body" not in answer


def _hang_up_mid_request(process) -> None:
    """Start a step that hangs, hang up on it, and see the server stop its process group."""
    request = {"op": "run", "tenant_id": 1, "inputs": {},
               "step": {"name": "s", "kind": "python", "call": "tests.steps:hang", "params": {}}}
    with pytest.raises(Aborted):
        process.client.call(request, 30, lambda: True)
    deadline = time.monotonic() + 5
    while process.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process.alive()


def test_a_caller_that_hangs_up_mid_request_stops_the_servers_process_group(process):
    # The server's own watchdog: the worker here does not kill anything itself.
    _hang_up_mid_request(process)


def test_the_servers_own_deadline_stops_a_step_the_caller_no_longer_watches(process):
    request = {"op": "run", "tenant_id": 1, "inputs": {}, "watchdog_ms": 500,
               "step": {"name": "s", "kind": "python", "call": "tests.steps:hang", "params": {}}}
    sock = _raw(process)
    buffer = bytearray()
    challenge = json.loads(read_line(sock, time.monotonic() + 5, buffer))["challenge"]
    sock.sendall(envelope(process.client.credential, "request", challenge, request))
    started = time.monotonic()
    line = read_line(sock, time.monotonic() + 10, buffer)
    assert b"watchdog" in line and time.monotonic() - started < 3
    deadline = time.monotonic() + 5
    while process.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process.alive()


def test_a_pods_server_follows_its_mounted_credential_when_it_changes(tmp_path):
    import signal
    import subprocess
    import sys

    from tickwarden.environments.runner import __file__ as runner

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    old, new = os.urandom(32), os.urandom(32)
    mounted = tmp_path / "credential"
    mounted.write_text(old.hex())
    server = subprocess.Popen([sys.executable, runner, "--tenant", "1", "--listen", f"tcp:127.0.0.1:{port}",
                               "--credential-file", str(mounted)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert server.stdout.readline() == b"listening\n"
        address = f"tcp:127.0.0.1:{port}"
        assert ExecutionClient(address, old).call({"op": "ping"}, 5)["tenant_id"] == 1
        mounted.write_text(new.hex())  # the platform key rotated; the kubelet updated the Secret's file
        assert ExecutionClient(address, new).call({"op": "ping"}, 5)["tenant_id"] == 1
        with pytest.raises(EnvironmentFailed, match="refused the request's credential"):
            ExecutionClient(address, old).call({"op": "ping"}, 5)
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


def test_one_watchdog_thread_watches_every_request_in_turn(process):
    # A thread started per request cost more than a no-op step: the server keeps one.
    request = {"op": "run", "tenant_id": 1, "inputs": {},
               "step": {"name": "s", "kind": "python", "call": "tests.steps:noop", "params": {}}}
    process.call(request, 5)
    settled = _threads(process.pid)
    for _ in range(30):
        assert process.call(request, 5)["ok"]
        assert _threads(process.pid) == settled
    # Still watching, after those: a later request past its own deadline stops the process group.
    hang = {**request, "step": {**request["step"], "call": "tests.steps:hang"}, "watchdog_ms": 300}
    sock = _raw(process)
    buffer = bytearray()
    challenge = json.loads(read_line(sock, time.monotonic() + 5, buffer))["challenge"]
    started = time.monotonic()
    sock.sendall(envelope(process.client.credential, "request", challenge, hang))
    assert b"watchdog" in read_line(sock, time.monotonic() + 10, buffer) and time.monotonic() - started < 2
    sock.close()
    deadline = time.monotonic() + 5
    while process.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process.alive()


def test_a_caller_hanging_up_after_its_answer_stops_nothing_and_a_later_hang_up_is_seen(process):
    for _ in range(5):
        sock = _raw(process)
        buffer = bytearray()
        challenge = json.loads(read_line(sock, time.monotonic() + 5, buffer))["challenge"]
        sock.sendall(envelope(process.client.credential, "request", challenge, {"op": "ping"}))
        assert b'"body"' in read_line(sock, time.monotonic() + 5, buffer)
        sock.close()  # at once, while the watchdog may still be looking at this connection
    time.sleep(0.5)
    assert process.alive() and process.call({"op": "ping"}, 5)["ok"]
    _hang_up_mid_request(process)


def _issued(process) -> str:
    """A challenge the server issued for a later connection: the one its last answer carried."""
    assert process.call({"op": "ping"}, 5)["ok"]
    issued = process.client._next
    assert isinstance(issued, str) and len(issued) >= 32
    return issued


def test_a_request_naming_an_issued_challenge_is_answered_without_a_greeting(process):
    issued = _issued(process)
    sock = _raw(process)
    sock.sendall(envelope(process.client.credential, "request", issued, {"op": "ping"}, named=True))
    buffer = bytearray()
    line = read_line(sock, time.monotonic() + 5, buffer)
    if line.startswith(b'{"challenge"'):  # greeted before the request arrived: the answer follows
        line = read_line(sock, time.monotonic() + 5, buffer)
    sock.close()
    answer = opened(process.client.credential, "answer", issued, line)
    assert answer["tenant_id"] == 1 and len(answer["next"]) >= 32


def test_an_issued_challenge_is_good_once_and_its_refusal_runs_nothing(process, tmp_path):
    issued = _issued(process)
    marker = tmp_path / "ran"
    request = {"op": "run", "tenant_id": 1, "inputs": {},
               "step": {"name": "s", "kind": "python", "call": "tests.steps:spawn_later",
                        "params": {"delay": 0, "path": str(marker)}}}
    recorded = envelope(process.client.credential, "request", issued, request, named=True)
    lines = []
    for _ in range(2):
        sock = _raw(process)
        sock.sendall(recorded)
        buffer = bytearray()
        line = read_line(sock, time.monotonic() + 5, buffer)
        if line.startswith(b'{"challenge"'):
            line = read_line(sock, time.monotonic() + 5, buffer)
        lines.append(line)
        sock.close()
    assert opened(process.client.credential, "answer", issued, lines[0])["ok"]
    time.sleep(0.3)
    assert marker.exists()
    marker.unlink()
    refused = json.loads(lines[1])
    # Unsigned: a replay earns no "nothing ran" the client would act on.
    assert "body" not in refused and "stale" not in refused and "used already" in refused["error"]
    time.sleep(0.3)
    assert not marker.exists()


def test_a_client_naming_a_used_challenge_fails_and_does_not_send_again(process, tmp_path):
    """An attacker between worker and environment forwards the worker's request (it runs), replays it
    to get a refusal, and hands that refusal to the worker: the worker must not run the request twice."""
    path = tmp_path / "journal"
    request = {"op": "run", "tenant_id": 1, "inputs": {},
               "step": {"name": "s", "kind": "python", "call": "tests.steps:journal",
                        "params": {"path": str(path), "key": "k", "seconds": 0}}}
    issued = _issued(process)
    sock = _raw(process)  # the forwarded original
    sock.sendall(envelope(process.client.credential, "request", issued, {**request, "watchdog_ms": 5000}, named=True))
    buffer = bytearray()
    line = read_line(sock, time.monotonic() + 5, buffer)
    if line.startswith(b'{"challenge"'):
        line = read_line(sock, time.monotonic() + 5, buffer)
    sock.close()
    assert opened(process.client.credential, "answer", issued, line)["ok"]
    process.client._next = issued  # the worker still holds it and names it
    with pytest.raises(EnvironmentFailed, match="used already"):
        process.call(request, 5)
    assert path.read_text().count("start k") == 1
    assert process.call({"op": "ping"}, 5)["ok"]  # greeted afresh, the environment serves on


def test_a_client_whose_challenge_the_server_forgot_is_greeted_and_served_once(process, tmp_path):
    path = tmp_path / "journal"
    request = {"op": "run", "tenant_id": 1, "inputs": {},
               "step": {"name": "s", "kind": "python", "call": "tests.steps:journal",
                        "params": {"path": str(path), "key": "k", "seconds": 0}}}
    _issued(process)
    process.client._next = os.urandom(32).hex()  # as after a restart of the server, or many challenges since
    assert process.call(request, 5)["ok"]
    assert path.read_text().count("start k") == 1
    # A refusal not signed with the environment's credential is not taken for one: nothing is sent again.
    forged = ExecutionClient(process.client.address, process.client.credential)
    assert not forged._stale("a" * 64, json.dumps({"error": "x", "stale": "0" * 64}).encode())


def test_the_watchdog_thread_is_not_woken_for_each_request(process):
    # Woken through its pipe for each request, it woke twice per no-op request (its start and its
    # connection's end): now it looks by itself every LOOK_SECONDS while requests keep coming.
    request = {"op": "run", "tenant_id": 1, "inputs": {},
               "step": {"name": "s", "kind": "python", "call": "tests.steps:noop", "params": {}}}
    process.call(request, 5)

    def others() -> int:  # voluntary context switches of the server's threads other than the main one
        total = 0
        for task in os.listdir(f"/proc/{process.pid}/task"):
            if int(task) != process.pid:
                with open(f"/proc/{process.pid}/task/{task}/status") as status:
                    total += next(int(line.split()[1]) for line in status if line.startswith("voluntary_ctxt"))
        return total

    before = others()
    for _ in range(300):
        assert process.call(request, 5)["ok"]
    woke = others() - before
    assert woke < 150, woke  # about 500 when woken for each request


def _accepted(pid: int) -> int:
    """Connections the server holds open besides its listener: sockets among its descriptors, less one."""
    fds = os.listdir(f"/proc/{pid}/fd")
    return sum(1 for fd in fds if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")) - 1


def test_requests_in_turn_go_over_one_kept_connection(process):
    # A connection per request cost a connect, an accept and a close, and, when the server looked
    # before the request had arrived, a greeting nobody needed (about 2 requests in 5).
    assert process.call({"op": "ping"}, 5)["ok"]
    kept = process.client._idle[0]
    for _ in range(20):
        assert process.call({"op": "ping"}, 5)["ok"]
        assert process.client._idle[0] is kept
    assert _accepted(process.pid) == 1


def test_each_request_on_a_kept_connection_needs_its_own_issued_challenge(process):
    sock = _raw(process)
    buffer, challenge, recorded = _greeted_ping(process, sock)
    answer = opened(process.client.credential, "answer", challenge, read_line(sock, time.monotonic() + 5, buffer))
    assert answer["keep"] is True
    # The same request again on the same connection: no greeting there, and its challenge is not issued.
    sock.sendall(recorded)
    refused = json.loads(read_line(sock, time.monotonic() + 5, buffer))
    assert "body" not in refused and "not issued" in refused["error"]
    assert sock.recv(1) == b""  # a refusal closes the connection
    sock.close()
    # The challenge the answer issued is good once on the kept connection, and a replay of it is refused.
    sock = _raw(process)
    buffer = bytearray()
    read_line(sock, time.monotonic() + 5, buffer)
    first = envelope(process.client.credential, "request", challenge := json.loads(
        b'{"c": "%s"}' % answer["next"].encode())["c"], {"op": "ping"}, named=True)
    sock.sendall(first)
    assert opened(process.client.credential, "answer", challenge, read_line(sock, time.monotonic() + 5, buffer))["ok"]
    sock.sendall(first)
    refused = json.loads(read_line(sock, time.monotonic() + 5, buffer))
    sock.close()
    assert "body" not in refused and "used already" in refused["error"]


def test_a_kept_connection_closed_while_idle_stops_nothing_and_a_hang_up_on_one_mid_request_stops_all(process):
    assert process.call({"op": "ping"}, 5)["ok"]
    process.client.close()  # idle: nothing runs
    time.sleep(0.5)
    assert process.alive() and process.call({"op": "ping"}, 5)["ok"]
    kept = process.client._idle[0]
    request = {"op": "run", "tenant_id": 1, "inputs": {},
               "step": {"name": "s", "kind": "python", "call": "tests.steps:hang", "params": {}}}
    # On the kept connection: hanging up mid-request is still the signal to stop the process group.
    # Still open when the call gives up: the call took it (a connection not taken is closed before a new one).
    used = []
    with pytest.raises(Aborted):
        process.client.call(request, 30, lambda: used.append(kept.fileno() != -1) or True)
    assert used == [True] and kept.fileno() == -1
    deadline = time.monotonic() + 5
    while process.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process.alive()


def test_past_its_kept_connections_a_server_says_a_connection_is_not_kept_and_closes_none_in_use(process):
    from tickwarden.environments.runner import KEPT

    assert process.call({"op": "ping"}, 5)["ok"]
    kept = process.client._idle[0]
    others = []
    for n in range(KEPT):  # the client's and KEPT - 1 more are kept; the last one is not
        sock = _raw(process)
        buffer = bytearray()
        challenge = json.loads(read_line(sock, time.monotonic() + 5, buffer))["challenge"]
        sock.sendall(envelope(process.client.credential, "request", challenge, {"op": "ping"}))
        answer = opened(process.client.credential, "answer", challenge, read_line(sock, time.monotonic() + 5, buffer))
        assert answer["keep"] is (n < KEPT - 1)
        others.append(sock)
    assert others[-1].recv(1) == b""  # closed after its answer
    stranger = ExecutionClient(process.client.address, process.client.credential)
    assert stranger.call({"op": "ping"}, 5)["ok"] and stranger._idle is None  # told it is not kept: closed
    # The client's own kept connection was not closed under it: its next request goes over it.
    assert process.call({"op": "ping"}, 5)["ok"] and process.client._idle[0] is kept
    for sock in others:
        sock.close()


def _closed_idle(tmp_path, monkeypatch):
    """A server that keeps connections idle for 0.2 s, its thread, and a client whose kept connection it closed."""
    import threading

    from tickwarden.environments import runner

    monkeypatch.setattr(runner, "KEPT_SECONDS", 0.2)
    credential = os.urandom(32)
    path = str(tmp_path / "s.sock")
    server = runner.Server(1, runner.listen(f"unix:{path}"), credential)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client = ExecutionClient(f"unix:{path}", credential)
    assert client.call({"op": "ping"}, 5)["ok"]
    kept = client._idle[0]
    deadline = time.monotonic() + 5
    while not _pending(kept) and time.monotonic() < deadline:
        time.sleep(0.05)
    return thread, client, kept


def test_a_server_closes_a_connection_kept_idle_past_kept_seconds(tmp_path, monkeypatch):
    thread, client, kept = _closed_idle(tmp_path, monkeypatch)
    assert kept.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""  # closed by the server, idle
    assert client.call({"op": "ping"}, 5)["ok"] and client._idle[0] is not kept  # a new one, the request served
    client.call({"op": "shutdown"}, 5)
    thread.join(5)
    assert not thread.is_alive()


def _pending(sock: socket.socket) -> bool:
    import select

    return bool(select.select([sock], [], [], 0)[0])


def test_read_line_reads_what_arrived_and_still_holds_a_trickling_peer_to_its_deadline():
    import threading

    from tickwarden.environments.runner import ProtocolError

    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(b'{"a": 1}\n{"b"')
        buffer = bytearray()
        assert read_line(ours, time.monotonic() + 1, buffer) == b'{"a": 1}' and buffer == b'{"b"'
        stop = threading.Event()

        def trickle() -> None:  # a byte every 50 ms, never a line's end
            while not stop.wait(0.05):
                theirs.sendall(b"x")

        thread = threading.Thread(target=trickle)
        thread.start()
        started = time.monotonic()
        try:
            with pytest.raises(ProtocolError, match="in time"):
                read_line(ours, started + 0.5, buffer)
        finally:
            stop.set()
            thread.join()
        assert time.monotonic() - started < 2


def test_a_kept_unix_connection_the_server_closed_fails_its_send_and_the_request_runs_once_on_a_new_one(
        tmp_path, monkeypatch):
    from tickwarden.environments import runner

    handled = []
    handle = runner.handle
    monkeypatch.setattr(runner, "handle", lambda *args: handled.append(args[1]["op"]) or handle(*args))
    # The server closes it idle (0.2 s); the client, which keeps one 5 s, would reuse it.
    thread, client, kept = _closed_idle(tmp_path, monkeypatch)
    handled.clear()
    assert client.call({"op": "ping"}, 5)["ok"]  # sent on the closed one first (EPIPE), then on a new one
    assert handled == ["ping"] and kept.fileno() == -1 and client._idle[0] is not kept
    client.call({"op": "shutdown"}, 5)
    thread.join(5)
