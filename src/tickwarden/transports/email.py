"""Email over SMTP: one thread per alert, by Message-ID, In-Reply-To and References.

The subject says the severity and the event (`[CRITICAL] opened: acme/nightly (alert #12)`).
The first message's Message-ID is the thread key; each later one answers it with
`In-Reply-To` and `References`, which is what Outlook and Thunderbird group
conversations by. Each mail is multipart/alternative (plain text, then autoescaped
HTML) and carries `Auto-Submitted: auto-generated` so auto-responders stay quiet.
Message-IDs are derived from the delivery's identity (the outbox row), so a retried
send carries the same id and a receiving server may drop the duplicate.

Channel config: `host` (required), `port` (default 25, or 465 with `ssl`), `from`
(required), `to` (an address or a list, required), `starttls` (bool), `ssl` (bool),
`username` (login, with the password from the channel's `secret_ref`), `timeout`.

A password never crosses the network in the clear: a channel that logs in must use
`starttls` or `ssl` (refused when it is configured, and again here), and TLS verifies the
server's certificate and host name against the system's trust store (`SSL_CERT_FILE`
names another), where smtplib's own default accepts any certificate. A tenant's SMTP host is
resolved and checked once (`outbound.resolve`) and the socket connects to an address that
check passed, as webhooks do: a name that resolves elsewhere the second time (DNS
rebinding) reaches nothing new.
"""

from __future__ import annotations

import smtplib
import socket
import ssl
from email.message import EmailMessage
from email.utils import format_datetime

from tickwarden import outbound
from tickwarden.transports.base import Delivery, OutgoingMessage, TransportError, channel_secret, config_value


class _Pinned(smtplib.SMTP):
    """Connects only to an address `outbound.resolve` checked for the host, never by a second lookup."""

    def __init__(self, ranges: list[outbound.Network], host: str, port: int, *, timeout: float):
        self.ranges = ranges  # read by `_get_socket`, which the constructor's connect calls
        super().__init__(host, port, timeout=timeout)

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        error: OSError | None = None
        for address in outbound.resolve(host, port, self.ranges):
            try:
                return socket.create_connection((str(address), port), timeout, self.source_address)
            except OSError as exc:
                error = exc
        assert error is not None
        raise error


class _PinnedSSL(smtplib.SMTP_SSL, _Pinned):
    """TLS from the first byte over `_Pinned`'s socket: SMTP_SSL wraps what its parent connects,
    verifying the certificate against the configured host name, not the address."""

    def __init__(self, ranges: list[outbound.Network], host: str, port: int, *, timeout: float,
                 context: ssl.SSLContext):
        self.ranges = ranges
        smtplib.SMTP_SSL.__init__(self, host, port, timeout=timeout, context=context)


def _connect(host: str, port: int, *, use_ssl: bool, timeout: float, pinned: list[outbound.Network] | None,
             context: ssl.SSLContext) -> smtplib.SMTP:
    """An open SMTP connection; with `pinned` (a tenant's host), to an address checked against those ranges."""
    if pinned is None:
        if use_ssl:
            return smtplib.SMTP_SSL(host, port, timeout=timeout, context=context)
        return smtplib.SMTP(host, port, timeout=timeout)
    if use_ssl:
        return _PinnedSSL(pinned, host, port, timeout=timeout, context=context)
    return _Pinned(pinned, host, port, timeout=timeout)


def login_problem(config: dict[str, object]) -> str | None:
    """Why a channel's configuration would send its password in the clear, if it would."""
    if config.get("username") and not (config.get("starttls") is True or config.get("ssl") is True):
        return "an email channel that logs in needs 'starttls' or 'ssl', or its password would cross the network in the clear"
    return None


class EmailTransport:
    """Send alert mail through an SMTP server."""

    def __init__(self, *, timeout: float = 10.0):
        self.timeout = timeout

    def send(self, message: OutgoingMessage) -> Delivery:
        channel = message.channel
        host = str(config_value(channel, "host"))
        use_ssl = bool(channel.config.get("ssl", False))
        port = int(channel.config.get("port") or (465 if use_ssl else 25))
        sender = str(config_value(channel, "from"))
        recipients = config_value(channel, "to")
        to = [recipients] if isinstance(recipients, str) else [str(r) for r in recipients]  # type: ignore[union-attr]
        username = channel.config.get("username")
        password = channel_secret(message) if username else None
        timeout = float(channel.config.get("timeout") or self.timeout)

        domain = sender.rpartition("@")[2] or "tickwarden.local"
        message_id = f"<tickwarden.{message.key}@{domain}>"
        mail = EmailMessage()
        mail["Subject"] = message.rendered.subject
        mail["From"] = sender
        mail["To"] = ", ".join(to)
        mail["Date"] = format_datetime(message.sent_at)
        mail["Message-ID"] = message_id
        if message.thread is not None:
            mail["In-Reply-To"] = message.thread.key
            mail["References"] = message.thread.key
        if message.alert_id is not None:
            mail["X-Tickwarden-Alert"] = str(message.alert_id)
        # RFC 3834: a machine wrote this; auto-responders (vacation replies) must not answer it.
        mail["Auto-Submitted"] = "auto-generated"
        mail["X-Auto-Response-Suppress"] = "All"  # the same for Exchange and Outlook
        mail.set_content(message.rendered.text)
        if message.rendered.html:
            # multipart/alternative: clients that show HTML pick the last part, the rest the text
            mail.add_alternative(message.rendered.html, subtype="html")

        problem = login_problem(channel.config)
        if problem is not None:
            raise TransportError(problem, permanent=True)
        pinned = outbound.allowed_ranges() if channel.tenant_id is not None else None
        context = ssl.create_default_context()
        try:
            with _connect(host, port, use_ssl=use_ssl, timeout=timeout, pinned=pinned, context=context) as smtp:
                if channel.config.get("starttls") and not use_ssl:
                    smtp.starttls(context=context)
                if username:
                    smtp.login(str(username), password or "")
                # raises SMTPRecipientsRefused when nobody accepted it; a partial refusal still delivered
                smtp.send_message(mail, from_addr=sender, to_addrs=to)
        except outbound.OutboundRefused as exc:
            raise TransportError(f"the SMTP host was refused: {exc.message}", permanent=True) from None
        except ssl.SSLCertVerificationError as exc:
            raise TransportError(f"the SMTP server's certificate was not trusted ({exc.verify_message})",
                                 permanent=True) from None
        except smtplib.SMTPAuthenticationError as exc:
            raise TransportError(f"the SMTP server refused the login ({exc.smtp_code})", permanent=True) from None
        except smtplib.SMTPRecipientsRefused as exc:
            codes = sorted({code for code, _ in exc.recipients.values()})
            raise TransportError(f"the SMTP server refused every recipient ({codes})",
                                 permanent=all(c >= 500 for c in codes)) from None
        except smtplib.SMTPResponseException as exc:
            raise TransportError(f"the SMTP server answered {exc.smtp_code}",
                                 permanent=500 <= exc.smtp_code < 600) from None
        except smtplib.SMTPNotSupportedError as exc:
            raise TransportError(f"the SMTP server does not support what the channel asks: {exc}", permanent=True) from None
        except (TimeoutError, smtplib.SMTPException, OSError) as exc:
            raise TransportError(f"the SMTP server is unreachable: {type(exc).__name__}", permanent=False) from None
        thread_key = message.thread.key if message.thread is not None else message_id
        return Delivery(message_id=message_id, thread_key=thread_key)
