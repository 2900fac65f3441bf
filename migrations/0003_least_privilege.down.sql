-- The role appdor_server is left in place: roles belong to the whole cluster,
-- and other Appdor databases on it may still use the role.
DROP FUNCTION IF EXISTS appdor_anyone_can_sign_in();
REVOKE SELECT ON schema_migrations FROM appdor_server;
REVOKE ALL ON sessions, users, realms, memberships, api_tokens, token_limits FROM appdor_server;
REVOKE USAGE ON SCHEMA public FROM appdor_server;

DROP POLICY IF EXISTS appdor_server_lookup ON realms;
DROP POLICY IF EXISTS appdor_server_lookup ON memberships;
DROP POLICY IF EXISTS appdor_server_lookup ON token_limits;
DROP POLICY IF EXISTS appdor_server_lookup ON api_tokens;
DROP POLICY IF EXISTS appdor_server_end ON sessions;
DROP POLICY IF EXISTS appdor_server_start ON sessions;
DROP POLICY IF EXISTS appdor_server_lookup ON sessions;
DROP POLICY IF EXISTS appdor_server_lookup ON users;
DROP POLICY IF EXISTS appdor_owner ON sessions;
DROP POLICY IF EXISTS appdor_owner ON users;
ALTER TABLE sessions NO FORCE ROW LEVEL SECURITY;
ALTER TABLE sessions DISABLE ROW LEVEL SECURITY;
ALTER TABLE users NO FORCE ROW LEVEL SECURITY;
ALTER TABLE users DISABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS appdor_owner ON realms;
DROP POLICY IF EXISTS appdor_owner ON memberships;
DROP POLICY IF EXISTS appdor_owner ON api_tokens;
DROP POLICY IF EXISTS appdor_owner ON token_limits;
DROP POLICY IF EXISTS appdor_owner ON audit_log;

-- Back to 0001's policy for the role that migrates.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['realms', 'memberships', 'api_tokens', 'token_limits', 'audit_log'] LOOP
        EXECUTE format('CREATE POLICY appdor_service ON %I TO %I USING (true) WITH CHECK (true)', t, current_user);
    END LOOP;
END
$$;
