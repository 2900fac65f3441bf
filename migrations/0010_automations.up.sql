-- Automations: per-table triggers with an optional condition and actions, the
-- durable queue of row-change events they evaluate, their run log, and the
-- webhook deliveries they make. Every table is a realm table: realm_id leads
-- its primary key, and ENABLE + FORCE ROW LEVEL SECURITY with realm_isolation
-- keeps realms apart, as in 0001.

CREATE TABLE automations (
    realm_id                uuid NOT NULL,
    id                      uuid NOT NULL,
    table_id                uuid NOT NULL,
    name                    text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    enabled                 boolean NOT NULL DEFAULT true,
    trigger                 jsonb NOT NULL,
    condition               jsonb NOT NULL DEFAULT '[]',
    actions                 jsonb NOT NULL,
    -- The signing secrets of the webhook actions, by action id. The server
    -- signs with them, so they are stored as given (not hashed); reads of the
    -- automation never select this column.
    secrets                 jsonb NOT NULL DEFAULT '{}',
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (realm_id, id),
    FOREIGN KEY (realm_id, table_id) REFERENCES tables (realm_id, id) ON DELETE CASCADE
);
CREATE INDEX automations_table_idx ON automations (realm_id, table_id);

-- The queue: one event per committed write batch of a table that has a
-- matching automation, inserted in the write's own transaction. It carries
-- ids, versions and changed field ids, never cell data. A claim leases an
-- event by moving run_at to the end of the lease; evaluation deletes it in
-- the transaction that applies its actions.
CREATE TABLE automation_events (
    realm_id                uuid NOT NULL REFERENCES realms (id) ON DELETE CASCADE,
    id                      bigint GENERATED ALWAYS AS IDENTITY,
    table_id                uuid NOT NULL,
    event                   text NOT NULL CHECK (event IN ('row.created', 'row.updated', 'row.deleted')),
    row_ids                 uuid[] NOT NULL,
    versions                bigint[] NOT NULL,
    fields                  text[] NOT NULL DEFAULT '{}',
    hop                     integer NOT NULL DEFAULT 0,
    state                   text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'failed')),
    attempts                integer NOT NULL DEFAULT 0,
    run_at                  timestamptz NOT NULL DEFAULT now(),
    last_error              text,
    created_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (realm_id, id)
);
-- The fair dequeue walks the realms with pending events through this index
-- (a loose index scan: one probe per realm, whatever each realm's backlog),
-- then takes one realm's oldest due event.
CREATE INDEX automation_events_due_idx ON automation_events (realm_id, run_at, id) WHERE state = 'pending';

CREATE TABLE automation_runs (
    realm_id                uuid NOT NULL,
    id                      uuid NOT NULL,
    automation_id           uuid NOT NULL,
    event                   text NOT NULL,
    event_id                bigint NOT NULL,
    row_ids                 uuid[] NOT NULL,
    hop                     integer NOT NULL,
    status                  text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed', 'dead')),
    attempts                integer NOT NULL DEFAULT 1,
    queued_at               timestamptz NOT NULL,
    started_at              timestamptz NOT NULL DEFAULT now(),
    finished_at             timestamptz,
    last_error              text,
    PRIMARY KEY (realm_id, id),
    FOREIGN KEY (realm_id, automation_id) REFERENCES automations (realm_id, id) ON DELETE CASCADE
);
CREATE INDEX automation_runs_automation_idx ON automation_runs (realm_id, automation_id, id);

-- One delivery per webhook action per event. Its id (msg_…) is the Standard
-- Webhooks webhook-id, the same on every attempt and on a replay.
CREATE TABLE webhook_deliveries (
    realm_id                uuid NOT NULL,
    id                      text NOT NULL,
    automation_id           uuid NOT NULL,
    action_id               text NOT NULL,
    run_id                  uuid NOT NULL,
    url                     text NOT NULL,
    state                   text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed', 'dead')),
    attempts                integer NOT NULL DEFAULT 0,
    next_attempt_at         timestamptz NOT NULL DEFAULT now(),
    last_status             integer,
    last_error              text,
    payload                 bytea NOT NULL,
    queued_at               timestamptz NOT NULL,
    delivered_at            timestamptz,
    created_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (realm_id, id),
    FOREIGN KEY (realm_id, run_id) REFERENCES automation_runs (realm_id, id) ON DELETE CASCADE
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (realm_id, next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_run_idx ON webhook_deliveries (realm_id, run_id);

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['automations', 'automation_events', 'automation_runs', 'webhook_deliveries'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format($p$CREATE POLICY realm_isolation ON %I
            USING (realm_id = (SELECT nullif(current_setting('appdor.realm_id', true), '')::uuid))
            WITH CHECK (realm_id = (SELECT nullif(current_setting('appdor.realm_id', true), '')::uuid))$p$, t);
    END LOOP;

    -- The dequeue must see every realm's queue to choose the next realm, so
    -- the serving role (appdor_server, outside appdor_tenant) may read and
    -- lease queue rows, and nothing more: no insert, no delete, no other
    -- table, and only on a connection of the automation workers' own pool,
    -- which declares itself with appdor.queue = 'worker' when it connects
    -- (the API's connections never do). Everything an event or a delivery
    -- then does runs as appdor_tenant in its realm, through rls. The owner
    -- gets the same, for an installation that serves as the owner (no
    -- APPDOR_MIGRATE_DATABASE_URL; appdor serve warns about it).
    FOREACH t IN ARRAY ARRAY['automation_events', 'webhook_deliveries'] LOOP
        EXECUTE format($p$CREATE POLICY appdor_queue_read ON %I FOR SELECT TO appdor_server, %I
            USING (current_setting('appdor.queue', true) = 'worker')$p$, t, current_user);
        EXECUTE format($p$CREATE POLICY appdor_queue_lease ON %I FOR UPDATE TO appdor_server, %I
            USING (current_setting('appdor.queue', true) = 'worker')
            WITH CHECK (current_setting('appdor.queue', true) = 'worker')$p$, t, current_user);
    END LOOP;
END
$$;

GRANT SELECT, UPDATE ON automation_events, webhook_deliveries TO appdor_server;

GRANT SELECT, INSERT, UPDATE, DELETE ON automations, automation_events, automation_runs, webhook_deliveries TO appdor_tenant;
