-- Appdor's PostgreSQL roles, made once by a superuser in the database Appdor
-- uses (docker compose mounts this file into /docker-entrypoint-initdb.d/,
-- which runs it when the data directory is new). README, "PostgreSQL roles".
--
--   appdor_migrator  LOGIN, owns the database and the schema: migrations
--                    (APPDOR_MIGRATE_DATABASE_URL) and the admin commands.
--   appdor_app       LOGIN, the server (APPDOR_DATABASE_URL): no superuser,
--                    no BYPASSRLS, owns nothing, holds appdor_server's grants.
--   appdor_server    NOLOGIN: what the server may do outside a realm (the
--                    migrations grant it); NOINHERIT, so the server does not
--                    hold the tenant's grants outside a tenant transaction.
--   appdor_tenant    NOLOGIN: what a realm's transaction may do.
--
-- Change both passwords, here and in the two URLs, before anything but a
-- trial on one machine.

CREATE ROLE appdor_migrator LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD 'appdor_migrator';
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I OWNER TO appdor_migrator', current_database()); END $$;
-- On PostgreSQL 14 and older, the public schema lets every role create in it.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
ALTER SCHEMA public OWNER TO appdor_migrator;

CREATE ROLE appdor_tenant NOLOGIN NOINHERIT NOBYPASSRLS;
CREATE ROLE appdor_server NOLOGIN NOINHERIT NOBYPASSRLS;
GRANT appdor_tenant TO appdor_server;
-- The migrations check that the role running them may become the tenant.
GRANT appdor_tenant TO appdor_migrator;

CREATE ROLE appdor_app LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE INHERIT PASSWORD 'appdor_app'
    IN ROLE appdor_server;
