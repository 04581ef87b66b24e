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
"""

from __future__ import annotations

import smtplib
from email.message import EmailMessage
from email.utils import format_datetime

from tickwarden import outbound
from tickwarden.transports.base import Delivery, OutgoingMessage, TransportError, channel_secret, config_value


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

        if channel.tenant_id is not None:
            try:
                outbound.check_host(host, port)
            except outbound.OutboundRefused as exc:
                raise TransportError(f"the SMTP host was refused: {exc.message}", permanent=True) from None
        try:
            smtp_class = smtplib.SMTP_SSL if use_ssl else smtplib.SMTP
            with smtp_class(host, port, timeout=timeout) as smtp:
                if channel.config.get("starttls") and not use_ssl:
                    smtp.starttls()
                if username:
                    smtp.login(str(username), password or "")
                # raises SMTPRecipientsRefused when nobody accepted it; a partial refusal still delivered
                smtp.send_message(mail, from_addr=sender, to_addrs=to)
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
