-- Idempotency keys for the grid's batch writes: a retried POST or PATCH with
-- the same Idempotency-Key (same realm, same route) gets the first answer and
-- writes nothing twice. The key row is inserted in the same transaction as the
-- write, so a concurrent retry waits on it and a failed write leaves no key.
CREATE TABLE idempotency_keys (
    realm_id                uuid NOT NULL REFERENCES realms (id) ON DELETE CASCADE,
    route                   text NOT NULL,
    key                     text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    request_hash            bytea NOT NULL,
    status                  integer,
    response                bytea,
    created_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (realm_id, route, key)
);
CREATE INDEX idempotency_keys_created_idx ON idempotency_keys (realm_id, created_at);

ALTER TABLE idempotency_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE idempotency_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY realm_isolation ON idempotency_keys
    USING (realm_id = (SELECT nullif(current_setting('appdor.realm_id', true), '')::uuid))
    WITH CHECK (realm_id = (SELECT nullif(current_setting('appdor.realm_id', true), '')::uuid));

GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency_keys TO appdor_tenant;


-- Search (q=) runs within one table of one realm: a GIN index led by realm_id
-- and table_id (btree_gin) finds a table's matching rows without visiting
-- other realms' matches, and replaces the search-only index of 0001.
CREATE EXTENSION IF NOT EXISTS btree_gin;
CREATE INDEX rows_table_search_idx ON rows USING gin (realm_id, table_id, search);
DROP INDEX IF EXISTS rows_search_idx;
