-- Environments as pods: where an environment runs, what its pod is given, and the warm
-- state every worker and control-plane replica shares.

-- `process`: a process local to each worker (the default). `kubernetes`: one StatefulSet per
-- environment, woken and stopped by tickwarden; `pod` holds its image, resources and volume.
ALTER TABLE environments
    ADD COLUMN runtime text NOT NULL DEFAULT 'process' CHECK (runtime IN ('process', 'kubernetes')),
    ADD COLUMN pod jsonb,
    ADD CONSTRAINT environments_pod_runtime CHECK ((runtime = 'kubernetes') = (pod IS NOT NULL));

-- One row per environment that ever ran as a pod. `awake` is what tickwarden last asked of its
-- StatefulSet (replicas 1); both a wake and a stop hold the row's lock across their call to the
-- Kubernetes API, so a stop can never land after a wake that followed it.
CREATE TABLE environment_pods (
    environment_id  bigint PRIMARY KEY REFERENCES environments (id) ON DELETE CASCADE,
    tenant_id       bigint NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    awake           boolean NOT NULL DEFAULT false,
    last_used_at    timestamptz,
    woken_at        timestamptz,
    stopped_at      timestamptz,
    wakes           integer NOT NULL DEFAULT 0 CHECK (wakes >= 0)
);
CREATE INDEX environment_pods_awake_idx ON environment_pods (last_used_at) WHERE awake;

SELECT tickwarden_enforce_tenant_isolation();
