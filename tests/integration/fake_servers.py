"""Real local servers the transports talk to: a Slack Web API stand-in, a webhook
receiver and an SMTP server (aiosmtpd). Each records what it received and can be
told to fail, so tests see exactly what left tickwarden on the wire."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import Message
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from aiosmtpd.controller import Controller
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from aiosmtpd.smtp import AuthResult


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def self_signed(directory: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A self-signed certificate for `host` (an IP address or a name) and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    try:
        alt: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        alt = x509.DNSName(host)
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "smtp-cert.pem", directory / "smtp-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, Any]:
        if self.headers.get("content-type", "").startswith("application/json"):
            return json.loads(self.body or b"{}")
        return {k: v[0] for k, v in parse_qs(self.body.decode()).items()}


@dataclass
class HTTPFake:
    """A threaded HTTP server; `answer(request) -> (status, headers, body)` decides the reply."""

    port: int = field(default_factory=free_port)
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        """Answer one request; each fake server says how."""
        return 501, {"Content-Type": "text/plain"}, b"this fake answers nothing"

    def delay(self, request: Request) -> float:
        """Seconds to wait, after the request was handled, before answering it."""
        return 0.0

    def start(self) -> HTTPFake:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                request = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length))
                with fake._lock:
                    fake.requests.append(request)
                    status, headers, body = fake.answer(request)
                time.sleep(fake.delay(request))  # outside the lock: other requests are answered meanwhile
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                # The query string stands in for a form body (the Slack SDK reads with GET).
                path, _, query = self.path.partition("?")
                request = Request(path, {k.lower(): v for k, v in self.headers.items()}, query.encode())
                with fake._lock:
                    fake.requests.append(request)
                    status, headers, body = fake.answer(request)
                time.sleep(fake.delay(request))  # outside the lock: other requests are answered meanwhile
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@dataclass
class SlackFake(HTTPFake):
    """Answers chat.postMessage and chat.update like Slack's Web API does."""

    token: str = "xoxb-test-token"
    fail_status: int | None = None          # answer every call with this HTTP status
    fail_error: str | None = None           # answer every call with ok=false and this error
    retry_after: int | None = None
    posts: list[dict[str, Any]] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)
    _ts: int = 1000
    epoch: int = 1764470000                 # the seconds part of the ts of every message posted
    delay_after_post: float = 0.0           # accept a post, then answer this late (a client timeout)
    lookups: list[str] = field(default_factory=list)   # conversations.* methods called

    @property
    def base_url(self) -> str:
        return f"{self.url}/api/"

    def answer(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        headers = {"Content-Type": "application/json"}
        if self.fail_status is not None:
            if self.retry_after is not None:
                headers["Retry-After"] = str(self.retry_after)
            return self.fail_status, headers, b'{"ok": false, "error": "ratelimited"}' if self.fail_status == 429 else b"oops"
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return 200, headers, b'{"ok": false, "error": "invalid_auth"}'
        if self.fail_error is not None:
            return 200, headers, json.dumps({"ok": False, "error": self.fail_error}).encode()
        data = request.json()
        if request.path.endswith("/chat.postMessage"):
            self._ts += 1
            ts = f"{self.epoch}.{self._ts:06d}"
            self.posts.append({**data, "ts": ts})
            return 200, headers, json.dumps({"ok": True, "channel": "C0CUSTOMER", "ts": ts}).encode()
        if request.path.endswith(("/conversations.history", "/conversations.replies")):
            return 200, headers, json.dumps(self._conversation(request.path.rsplit("/", 1)[1], data)).encode()
        if request.path.endswith("/chat.update"):
            self.updates.append(data)
            return 200, headers, json.dumps({"ok": True, "channel": data.get("channel"), "ts": data.get("ts")}).encode()
        return 200, headers, b'{"ok": false, "error": "unknown_method"}'


    def delay(self, request: Request) -> float:
        return self.delay_after_post if request.path.endswith("/chat.postMessage") else 0.0

    def _conversation(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        """conversations.history (top-level messages, newest first, from `oldest`) or .replies (a thread),
        one page of `limit` with a cursor; metadata only with include_all_metadata, as Slack does."""
        self.lookups.append(method)
        if args.get("channel") not in {p.get("channel") for p in self.posts} | {"C0CUSTOMER"}:
            return {"ok": False, "error": "channel_not_found"}
        with_metadata = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        if method == "conversations.history":
            found = [p for p in self.posts if "thread_ts" not in p and float(p["ts"]) >= float(args.get("oldest") or 0)]
            found.reverse()
        else:
            found = [p for p in self.posts if p["ts"] == args.get("ts") or p.get("thread_ts") == args.get("ts")]
        start = int(args.get("cursor") or 0)
        limit = int(args.get("limit") or 100)
        page = found[start:start + limit]
        messages = [{"type": "message", "ts": p["ts"], "text": p.get("text", ""),
                     **({"metadata": p["metadata"]} if with_metadata and p.get("metadata") else {})} for p in page]
        more = start + limit < len(found)
        return {"ok": True, "messages": messages, "has_more": more,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""}}


@dataclass
class WebhookFake(HTTPFake):
    """A receiver that answers `status` (200 by default) and records every POST."""

    status: int = 200

    def answer(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        return self.status, {"Content-Type": "text/plain"}, b"ok" if self.status < 300 else b"no"


class _Collector:
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self.reject_with: str | None = None

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd hook
        if self.reject_with:
            return self.reject_with
        self.messages.append(message_from_bytes(envelope.original_content or envelope.content, policy=policy.default))
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        return "250 OK"


class SMTPFake:
    """An aiosmtpd server on 127.0.0.1 and a free port; with `login`, AUTH is required.

    With `certificate` (cert and key PEM files), the server speaks TLS: `tls="starttls"`
    offers STARTTLS and advertises AUTH only after it, `tls="ssl"` is TLS from the first byte.
    """

    def __init__(self, login: tuple[str, str] | None = None, *, certificate: tuple[Path, Path] | None = None,
                 tls: str = "starttls") -> None:
        self.port = free_port()
        self.collector = _Collector()
        self.login = login
        self.certificate = certificate
        self.tls = tls
        self.logins: list[str] = []
        self._controller: Controller | None = None

    def _authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
        user = auth_data.login.decode()
        self.logins.append(user)
        ok = self.login is not None and (user, auth_data.password.decode()) == self.login
        return AuthResult(success=ok, handled=False)

    @property
    def messages(self) -> list[Message]:
        return self.collector.messages

    def start(self) -> SMTPFake:
        options: dict[str, Any] = {}
        if self.login is not None:
            options = {"authenticator": self._authenticate, "auth_required": True,
                       "auth_exclude_mechanism": ["LOGIN"]}  # smtplib then tries PLAIN only
        if self.certificate is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*self.certificate)
            options["ssl_context" if self.tls == "ssl" else "tls_context"] = context
        self._controller = Controller(self.collector, hostname="127.0.0.1", port=self.port, **options)
        self._controller.start()
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None


@dataclass
class PagerDutyFake(HTTPFake):
    """Answers POST /v2/enqueue like PagerDuty's Events API v2 and keeps each incident's state by dedup key."""

    routing_key: str = "R0UTINGKEY0TEST0TICKWARDEN000001"
    fail_status: int | None = None
    retry_after: int | None = None
    incidents: dict[str, str] = field(default_factory=dict)   # dedup key → triggered | acknowledged | resolved
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def events_url(self) -> str:
        return f"{self.url}/v2/enqueue"

    def answer(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        headers = {"Content-Type": "application/json"}
        if self.fail_status is not None:
            if self.retry_after is not None:
                headers["Retry-After"] = str(self.retry_after)
            return self.fail_status, headers, b'{"status": "throttle event", "message": "Requests for this service are arriving too quickly."}'
        if request.path != "/v2/enqueue":
            return 404, headers, b'{"status": "not found"}'
        try:
            event = json.loads(request.body)
        except ValueError:
            return 400, headers, b'{"status": "invalid event", "message": "Event object is invalid", "errors": ["Invalid JSON"]}'
        errors = []
        if event.get("routing_key") != self.routing_key:
            errors.append("Invalid routing key")
        action = event.get("event_action")
        if action not in ("trigger", "acknowledge", "resolve"):
            errors.append("'event_action' is invalid")
        if action != "trigger" and not event.get("dedup_key"):
            errors.append("'dedup_key' is required for this event_action")
        if action == "trigger":
            payload = event.get("payload") or {}
            if not payload.get("summary") or not payload.get("source"):
                errors.append("'payload.summary' and 'payload.source' are required")
            if payload.get("severity") not in ("critical", "error", "warning", "info"):
                errors.append("'payload.severity' is invalid")
        if errors:
            return 400, headers, json.dumps({"status": "invalid event", "message": "Event object is invalid",
                                             "errors": errors}).encode()
        self.events.append(event)
        key = event.get("dedup_key") or f"generated-{len(self.events)}"
        state = {"trigger": "triggered", "acknowledge": "acknowledged", "resolve": "resolved"}[action]
        if action == "trigger" and self.incidents.get(key) == "acknowledged":
            state = "acknowledged"  # a repeated trigger folds into the open incident
        if action != "trigger" and key not in self.incidents:
            state = None  # acknowledging or resolving nothing is accepted and ignored
        if state:
            self.incidents[key] = state
        return 202, headers, json.dumps({"status": "success", "message": "Event processed",
                                         "dedup_key": key}).encode()


@dataclass
class TeamsFake(HTTPFake):
    """A Teams Workflows webhook: takes a message with an Adaptive Card attachment and answers 202."""

    fail_status: int | None = None
    retry_after: int | None = None
    throttle_in_body: bool = False   # what an old connector does: HTTP 200, the 429 in its text
    cards: list[dict[str, Any]] = field(default_factory=list)

    @property
    def webhook_url(self) -> str:
        return f"{self.url}/workflows/abc123/triggers/manual/paths/invoke?sig=SIGNATURE0SECRET"

    def answer(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        if self.fail_status is not None:
            headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
            return self.fail_status, headers, b'{"error": {"code": "TooManyRequests"}}'
        if self.throttle_in_body:
            return 200, {"Content-Type": "text/plain"}, (
                b"Webhook message delivery failed with error: Microsoft Teams endpoint returned HTTP error 429 "
                b"with ContextId tcid=0,server=msgapi-production")
        if "sig=SIGNATURE0SECRET" not in request.path:
            return 401, {}, b'{"error": {"code": "DirectApiAuthorizationRequired"}}'
        try:
            message = json.loads(request.body)
            [attachment] = message["attachments"]
            assert message["type"] == "message"
            assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
            assert attachment["content"]["type"] == "AdaptiveCard"
        except (ValueError, KeyError, TypeError, AssertionError):
            return 400, {"Content-Type": "application/json"}, b'{"error": {"code": "InvalidRequestContent"}}'
        self.cards.append(attachment["content"])
        return 202, {}, b""
