-- ack_links_use --
-- When a signed acknowledge link (its SHA-256) was used, if it was.
SELECT used_at FROM ack_link_uses WHERE digest = %(digest)s;

-- ack_links_record_ack_link_use --
-- Record that a link acknowledged its alert, in the acknowledgement's transaction. The
-- primary key makes a second use (a replay, or two clicks racing on two replicas) a no-op
-- that returns no row, which rolls the second acknowledgement back.
INSERT INTO ack_link_uses (digest, tenant_id, alert_id, used_at, expires_at)
SELECT %(digest)s, a.tenant_id, a.id, %(now)s, %(expires_at)s FROM alerts a WHERE a.id = %(alert_id)s
    ON CONFLICT (digest) DO NOTHING
RETURNING digest;
