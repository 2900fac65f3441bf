CREATE INDEX IF NOT EXISTS rows_search_idx ON rows USING gin (search);
DROP INDEX IF EXISTS rows_table_search_idx;
DROP TABLE IF EXISTS idempotency_keys;
