-- heartbeat_record --
-- Record one pass of one loop of one replica: the watcher is watched. last_error is
-- the error of this pass (NULL when it succeeded).
INSERT INTO loop_heartbeats (replica_id, loop, last_pass_at, last_duration_ms, passes, last_error, next_pass_at)
VALUES (%(replica_id)s, %(loop)s, %(at)s, %(duration_ms)s, 1, %(error)s, %(next_pass_at)s)
    ON CONFLICT (replica_id, loop) DO UPDATE
   SET last_pass_at = EXCLUDED.last_pass_at, last_duration_ms = EXCLUDED.last_duration_ms,
       passes = loop_heartbeats.passes + 1, last_error = EXCLUDED.last_error,
       next_pass_at = EXCLUDED.next_pass_at;

-- heartbeat_list --
-- Every replica's loops, most recent pass first.
SELECT * FROM loop_heartbeats ORDER BY last_pass_at DESC, replica_id, loop;
