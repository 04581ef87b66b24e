"""Notifier benchmark: outbox deliveries per second through claim → render → send → record.

    python -m benchmarks.notifier [--alerts 2000] [--history 200000] [--batch 100] [--json]

1. `history` delivered rows (resolved alerts of the past) fill the outbox first, so the
   claim is measured over a realistic table, not an empty one.
2. `alerts` open alerts, each with an `opened` and an `escalated` event, fan out to a
   customer channel and the engineering channel: 4 × alerts rows to deliver, two per
   thread, in order.
3. Replicas (separate processes, 1 then 2) run `Notifier.run_once` with the in-memory
   recording transport until the outbox is drained. Figures: deliveries/s, and the
   median time of one claim of `batch` rows. The transport costs nothing here: these
   are tickwarden's own costs per message (SQL, rendering, bookkeeping).
4. The floor beside each: a raw `SKIP LOCKED` claim of `batch` rows per transaction on a
   bare job table, with as many clients. DESIGN.md sets no target here.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from datetime import timedelta

from benchmarks import common
from benchmarks.common import (BENCH_URL, EPOCH, Figure, analyze_schema, bench_schema, connect, finish, median_ms, progress,
                               report)


def fill(schema: str, alerts: int, history: int) -> None:
    with connect(schema) as conn:
        conn.execute("INSERT INTO tenants (name, display_name, created_at) VALUES ('bench', 'bench', %s)", (EPOCH,))
        conn.execute("""INSERT INTO notification_channels (tenant_id, name, kind, audience, created_at)
                        VALUES (1, 'customer', 'recording', 'customer', %(t)s),
                               (NULL, 'eng', 'recording', 'engineering', %(t)s)""", {"t": EPOCH})
        total = alerts + history // 4
        conn.execute("INSERT INTO workflows (tenant_id, name, created_at, updated_at)"
                     " SELECT 1, 'wf-' || g, %s, %s FROM generate_series(1, %s) g", (EPOCH, EPOCH, total))
        # past alerts (resolved, delivered), then the open ones to deliver now
        conn.execute(
            """INSERT INTO alerts (tenant_id, workflow_id, status, first_severity, severity, owner, failure_count,
                                   cadence_seconds, escalation_multiplier, escalate_after, escalate_at,
                                   first_failure_at, last_failure_at, last_error, opened_at, escalated_at,
                                   resolved_at, downtime_seconds)
               SELECT 1, g, CASE WHEN g <= %(past)s THEN 'resolved' ELSE 'open' END, 'warning', 'critical',
                      'engineering', 3, 3600, 2, 3, %(t)s, %(t)s, %(t)s, 'relation "sales" does not exist',
                      %(t)s, %(t)s, CASE WHEN g <= %(past)s THEN %(t)s END, CASE WHEN g <= %(past)s THEN 60 END
                 FROM generate_series(1, %(total)s) g""",
            {"past": history // 4, "total": total, "t": EPOCH})
        conn.execute(
            """INSERT INTO alert_events (tenant_id, alert_id, kind, at, severity, owner)
               SELECT 1, a.id, k.kind, %(t)s, 'critical', 'engineering'
                 FROM alerts a CROSS JOIN (VALUES ('opened', 1), ('escalated', 2)) k(kind, n)
                ORDER BY a.id, k.n""", {"t": EPOCH})
        conn.execute(
            """INSERT INTO notification_outbox (tenant_id, event_id, alert_id, channel_id, status, tries,
                                                next_attempt_at, created_at, sent_at)
               SELECT 1, e.id, e.alert_id, c.id, 'sent', 1, %(t)s, %(t)s, %(t)s
                 FROM alert_events e JOIN alerts a ON a.id = e.alert_id AND a.status = 'resolved'
                CROSS JOIN notification_channels c""", {"t": EPOCH})
        conn.execute("""INSERT INTO notification_threads (alert_id, channel_id, tenant_id, thread_key, created_at)
                        SELECT a.id, c.id, 1, 'k' || a.id, %(t)s FROM alerts a CROSS JOIN notification_channels c
                         WHERE a.status = 'resolved'""", {"t": EPOCH})
        from tickwarden.store import Store

        store = Store(conn)
        ids = [r[0] for r in conn.execute("SELECT e.id FROM alert_events e JOIN alerts a ON a.id = e.alert_id"
                                          " WHERE a.status = 'open' ORDER BY e.id").fetchall()]
        store.outbox.enqueue_notifications(ids, EPOCH)
        conn.commit()
        analyze_schema(conn)


def _replica(args: tuple[str, int, int]) -> int:
    schema, number, batch = args
    from tickwarden.db import Database
    from tickwarden.notifier import Notifier
    from tickwarden.transports.recording import RecordingTransport

    db = Database(BENCH_URL, schema=schema, min_size=1, max_size=2)
    notifier = Notifier(db, f"bench-{number}", {"recording": RecordingTransport()}, batch=batch, rounds=1000)
    sent, idle = 0, 0
    now = EPOCH + timedelta(minutes=1)
    while idle < 3:
        notifier.run_once(now)
        sent += notifier.last_pass.sent
        idle = idle + 1 if notifier.last_pass.sent == 0 else 0
    db.close()
    return sent


def drain(alerts: int, history: int, batch: int, replicas: int) -> tuple[float, int, float]:
    with bench_schema("bench_notify") as schema:
        fill(schema, alerts, history)
        claim_ms = time_claim(schema, batch)
        t0 = time.perf_counter()
        with mp.get_context("spawn").Pool(replicas) as pool:
            sent = sum(pool.map(_replica, [(schema, i, batch) for i in range(replicas)]))
        elapsed = time.perf_counter() - t0
        with connect(schema) as conn:
            left = conn.execute("SELECT count(*) FROM notification_outbox WHERE status <> 'sent'").fetchone()[0]
        assert left == 0 and sent == alerts * 4, (left, sent)
        return sent / elapsed, sent, claim_ms


def time_claim(schema: str, batch: int) -> float:
    """Median time of one claim of `batch` rows over the filled outbox (rolled back each time)."""
    from tickwarden.store import Store

    with connect(schema) as conn:
        store = Store(conn)

        def once() -> None:
            rows = store.outbox.claim_outbox("probe", EPOCH + timedelta(minutes=1), EPOCH + timedelta(minutes=6), batch,
                                      ["recording"])
            assert rows
            conn.rollback()

        return median_ms(once, 30)


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--alerts", type=int, default=2000)
    parser.add_argument("--history", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    rows = []
    progress(f"floor: raw SKIP LOCKED claims of {args.batch} rows per transaction, 1 and 2 clients")
    raw = common.raw_claims([(1, args.batch), (2, args.batch)], 4.0, args.alerts * 4)
    figures: list[Figure] = []
    for replicas in (1, 2):
        progress(f"{replicas} replica(s): filling the outbox, then draining it")
        rate, sent, claim_ms = drain(args.alerts, args.history, args.batch, replicas)
        rows.append((f"{replicas} replica(s)", f"{rate:,.0f} deliveries/s ({sent} rows, 2 per thread, in order)"))
        rows.append((f"claim of {args.batch} ({replicas})", f"{claim_ms:.2f} ms median over {args.history:,} delivered rows"))
        figures.append(Figure(f"deliveries, {replicas} replica(s), recording transport", rate, "deliveries/s",
                              raw[(replicas, args.batch)]))
    report(f"notifier: {args.alerts} open alerts × 2 events × 2 channels, recording transport", rows)
    finish(f"notifier figures (floor: a raw SKIP LOCKED claim of {args.batch} rows per txn, as many clients)",
           figures, args.json)


if __name__ == "__main__":
    main()
