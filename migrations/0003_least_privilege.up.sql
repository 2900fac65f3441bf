-- Least privilege: the role that serves requests no longer owns the schema.
--
-- appdor_server (NOLOGIN NOINHERIT NOBYPASSRLS, owns nothing) holds what the
-- serving login role needs outside a tenant transaction; the login role is made
-- a member of it once (README, "PostgreSQL roles"), so the grants below work
-- whatever the login role is called. It is a member of appdor_tenant, so the
-- login role may SET ROLE appdor_tenant, but NOINHERIT: the login role does not
-- hold the tenant's grants outside a tenant transaction.
--
-- Outside a tenant transaction the serving role reads only what authentication
-- needs, and only the rows it names: a user by email, a session by its hash, a
-- token by its hash, and the memberships and realms of that token, of that
-- session's person or of a user (by id); it starts a session for a user and
-- ends one by its hash. The lookup sets the key for its one statement
-- (appdor.token_hash and appdor.session_hash as hex, appdor.user_id,
-- appdor.email), as a tenant transaction sets appdor.realm_id; with no key
-- set, these policies match nothing. Everything realm-scoped that is not
-- authentication (listing, creating, revoking tokens) runs in a tenant
-- transaction, where only realm_isolation applies.
--
-- The owner (the role running this migration) keeps its own policy: the admin
-- commands create realms, members and tokens as the owner, and an operator
-- reads the audit log as the owner. Run the server as that same role and it
-- sees every realm, as before; `appdor serve` warns.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'appdor_server') THEN
        CREATE ROLE appdor_server NOLOGIN NOINHERIT NOBYPASSRLS;
    END IF;
    -- Granting needs ADMIN on appdor_tenant even when nothing changes: ask first.
    IF NOT pg_has_role('appdor_server', 'appdor_tenant', 'MEMBER') THEN
        GRANT appdor_tenant TO appdor_server;
    END IF;
END
$$;

-- The policy that let the owner (and so a serving owner) see every realm's
-- tokens, memberships, realms and audit log gives way to narrow ones.
DROP POLICY IF EXISTS appdor_service ON realms;
DROP POLICY IF EXISTS appdor_service ON memberships;
DROP POLICY IF EXISTS appdor_service ON api_tokens;
DROP POLICY IF EXISTS appdor_service ON token_limits;
DROP POLICY IF EXISTS appdor_service ON audit_log;

-- People and sessions are global, not realm-owned, but hold password hashes
-- and the hashes of live sessions: the serving role reads them by key too.
ALTER TABLE users ENABLE ROW LEVEL SECURITY;
ALTER TABLE users FORCE ROW LEVEL SECURITY;
ALTER TABLE sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE sessions FORCE ROW LEVEL SECURITY;

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['realms', 'memberships', 'api_tokens', 'token_limits', 'audit_log', 'users', 'sessions'] LOOP
        EXECUTE format('CREATE POLICY appdor_owner ON %I TO %I USING (true) WITH CHECK (true)', t, current_user);
    END LOOP;
END
$$;

-- A person by email (sign-in) or by id (/me).
CREATE POLICY appdor_server_lookup ON users FOR SELECT TO appdor_server
    USING (
        lower(email) = lower((SELECT nullif(current_setting('appdor.email', true), '')))
        OR id = (SELECT nullif(current_setting('appdor.user_id', true), '')::uuid)
    );

-- A session by its hash; a person's sessions while signing them in, when
-- their expired sessions are swept.
CREATE POLICY appdor_server_lookup ON sessions FOR SELECT TO appdor_server
    USING (
        hash = (SELECT decode(nullif(current_setting('appdor.session_hash', true), ''), 'hex'))
        OR user_id = (SELECT nullif(current_setting('appdor.user_id', true), '')::uuid)
    );
CREATE POLICY appdor_server_start ON sessions FOR INSERT TO appdor_server
    WITH CHECK (user_id = (SELECT nullif(current_setting('appdor.user_id', true), '')::uuid));
CREATE POLICY appdor_server_end ON sessions FOR DELETE TO appdor_server
    USING (
        hash = (SELECT decode(nullif(current_setting('appdor.session_hash', true), ''), 'hex'))
        OR (user_id = (SELECT nullif(current_setting('appdor.user_id', true), '')::uuid) AND expires_at <= now())
    );

-- A token by its hash.
CREATE POLICY appdor_server_lookup ON api_tokens FOR SELECT TO appdor_server
    USING (hash = (SELECT decode(nullif(current_setting('appdor.token_hash', true), ''), 'hex')));

-- The ceiling of that token. (Each policy names its key itself rather than
-- lean on the policies of the tables its subqueries read, which filter them
-- too.)
CREATE POLICY appdor_server_lookup ON token_limits FOR SELECT TO appdor_server
    USING ((realm_id, token_id) IN (
        SELECT t.realm_id, t.id FROM api_tokens t
        WHERE t.hash = (SELECT decode(nullif(current_setting('appdor.token_hash', true), ''), 'hex'))));

-- The membership behind that token, or the memberships of a session's person,
-- or of a user by id.
CREATE POLICY appdor_server_lookup ON memberships FOR SELECT TO appdor_server
    USING (
        user_id = (SELECT nullif(current_setting('appdor.user_id', true), '')::uuid)
        OR (realm_id, user_id) IN (
            SELECT t.realm_id, t.user_id FROM api_tokens t
            WHERE t.hash = (SELECT decode(nullif(current_setting('appdor.token_hash', true), ''), 'hex')))
        OR user_id IN (
            SELECT s.user_id FROM sessions s
            WHERE s.hash = (SELECT decode(nullif(current_setting('appdor.session_hash', true), ''), 'hex')))
    );

-- The realms of those memberships. Each branch is led by an index (token hash,
-- membership user, session hash), so a lookup never scans a realm's members.
CREATE POLICY appdor_server_lookup ON realms FOR SELECT TO appdor_server
    USING (
        id IN (
            SELECT t.realm_id FROM api_tokens t
            WHERE t.hash = (SELECT decode(nullif(current_setting('appdor.token_hash', true), ''), 'hex')))
        OR id IN (
            SELECT m.realm_id FROM memberships m
            WHERE m.user_id = (SELECT nullif(current_setting('appdor.user_id', true), '')::uuid))
        OR id IN (
            SELECT m.realm_id FROM memberships m JOIN sessions s ON s.user_id = m.user_id
            WHERE s.hash = (SELECT decode(nullif(current_setting('appdor.session_hash', true), ''), 'hex')))
    );

-- What the serving role may touch at all. Nothing on the grid tables or the
-- audit log: those are reached as appdor_tenant only. No UPDATE or DELETE on
-- tenancy's realm tables: changes to tokens run in a tenant transaction.
GRANT USAGE ON SCHEMA public TO appdor_server;
GRANT SELECT ON realms, memberships, api_tokens, token_limits TO appdor_server;
GRANT SELECT (id, email, password_hash) ON users TO appdor_server;
GRANT SELECT, INSERT, DELETE ON sessions TO appdor_server;
-- `appdor serve --migrate=false` checks the schema's version as the serving role.
GRANT SELECT ON schema_migrations TO appdor_server;

-- At start the server says how to make the first person when there is none:
-- whether anyone exists, and nothing more, as the owner.
CREATE FUNCTION appdor_anyone_can_sign_in() RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$ SELECT EXISTS (SELECT 1 FROM public.users) $$;
REVOKE ALL ON FUNCTION appdor_anyone_can_sign_in() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION appdor_anyone_can_sign_in() TO appdor_server;
