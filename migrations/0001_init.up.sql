-- Appdor's first schema: tenancy (realms, users, memberships, tokens, sessions),
-- the grid (apps, tables, fields, rows) and the audit log.
--
-- Every realm-owned table leads its primary key with realm_id and has ENABLE and
-- FORCE ROW LEVEL SECURITY with the realm_isolation policy. With the setting
-- appdor.realm_id absent (or reset to '' at the end of a transaction) the policy
-- matches nothing: the tables fail closed.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'appdor_tenant') THEN
        CREATE ROLE appdor_tenant NOLOGIN NOBYPASSRLS NOINHERIT;
    END IF;
    -- The serving role switches to appdor_tenant with SET LOCAL ROLE, which needs
    -- membership. A superuser is a member of every role already.
    IF NOT pg_has_role(current_user, 'appdor_tenant', 'MEMBER') THEN
        EXECUTE format('GRANT appdor_tenant TO %I', current_user);
    END IF;
END
$$;

CREATE TABLE realms (
    id                      uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name                    text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    requests_per_minute     integer CHECK (requests_per_minute > 0),
    created_at              timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id                      uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email                   text NOT NULL CHECK (length(email) BETWEEN 3 AND 320),
    password_hash           text NOT NULL,
    created_at              timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email_key ON users (lower(email));

CREATE TABLE memberships (
    realm_id                uuid NOT NULL REFERENCES realms (id) ON DELETE CASCADE,
    user_id                 uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role                    text NOT NULL CHECK (role IN ('owner', 'editor', 'viewer')),
    created_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (realm_id, user_id)
);
CREATE INDEX memberships_user_idx ON memberships (user_id);

CREATE TABLE api_tokens (
    realm_id                uuid NOT NULL,
    id                      uuid NOT NULL DEFAULT gen_random_uuid(),
    user_id                 uuid NOT NULL,
    name                    text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    hash                    bytea NOT NULL,
    created_at              timestamptz NOT NULL DEFAULT now(),
    revoked_at              timestamptz,
    PRIMARY KEY (realm_id, id),
    FOREIGN KEY (realm_id, user_id) REFERENCES memberships (realm_id, user_id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX api_tokens_hash_key ON api_tokens (hash);
CREATE UNIQUE INDEX api_tokens_id_key ON api_tokens (id);

CREATE TABLE token_limits (
    realm_id                uuid NOT NULL,
    token_id                uuid NOT NULL,
    requests_per_minute     integer NOT NULL CHECK (requests_per_minute > 0),
    PRIMARY KEY (realm_id, token_id),
    FOREIGN KEY (realm_id, token_id) REFERENCES api_tokens (realm_id, id) ON DELETE CASCADE
);

-- Sessions belong to a person, not to a realm: the realm is chosen per request.
CREATE TABLE sessions (
    hash                    bytea PRIMARY KEY,
    user_id                 uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at              timestamptz NOT NULL DEFAULT now(),
    expires_at              timestamptz NOT NULL
);
CREATE INDEX sessions_user_idx ON sessions (user_id);

CREATE TABLE apps (
    realm_id                uuid NOT NULL REFERENCES realms (id) ON DELETE CASCADE,
    id                      uuid NOT NULL DEFAULT gen_random_uuid(),
    name                    text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (realm_id, id)
);

CREATE TABLE tables (
    realm_id                uuid NOT NULL,
    id                      uuid NOT NULL DEFAULT gen_random_uuid(),
    app_id                  uuid NOT NULL,
    name                    text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (realm_id, id),
    FOREIGN KEY (realm_id, app_id) REFERENCES apps (realm_id, id) ON DELETE CASCADE
);
CREATE INDEX tables_app_idx ON tables (realm_id, app_id);

CREATE TABLE fields (
    realm_id                uuid NOT NULL,
    id                      uuid NOT NULL DEFAULT gen_random_uuid(),
    table_id                uuid NOT NULL,
    name                    text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    type                    text NOT NULL,
    options                 jsonb NOT NULL DEFAULT '{}',
    position                integer NOT NULL,
    created_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (realm_id, id),
    FOREIGN KEY (realm_id, table_id) REFERENCES tables (realm_id, id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX fields_table_name_key ON fields (realm_id, table_id, lower(name));

-- The cells of every user table, keyed by field id. Row ids are UUIDv7, made in
-- Go, so the keyset order by id is the order of creation.
CREATE TABLE rows (
    realm_id                uuid NOT NULL,
    id                      uuid NOT NULL,
    table_id                uuid NOT NULL,
    cells                   jsonb NOT NULL DEFAULT '{}',
    version                 bigint NOT NULL DEFAULT 1,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    search                  tsvector GENERATED ALWAYS AS (jsonb_to_tsvector('simple'::regconfig, cells, '["string"]')) STORED,
    PRIMARY KEY (realm_id, id),
    FOREIGN KEY (realm_id, table_id) REFERENCES tables (realm_id, id) ON DELETE CASCADE
);
CREATE INDEX rows_table_idx ON rows (realm_id, table_id, id);
CREATE INDEX rows_search_idx ON rows USING gin (search);

CREATE TABLE audit_log (
    realm_id                uuid NOT NULL REFERENCES realms (id) ON DELETE CASCADE,
    id                      bigint GENERATED ALWAYS AS IDENTITY,
    at                      timestamptz NOT NULL DEFAULT now(),
    actor                   text NOT NULL,
    action                  text NOT NULL,
    detail                  jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (realm_id, id)
);

-- Row-level security. realm_isolation is the wall between realms; it applies to
-- every role, the table owner included (FORCE).
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['memberships', 'api_tokens', 'token_limits', 'apps', 'tables', 'fields', 'rows', 'audit_log'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format($p$CREATE POLICY realm_isolation ON %I
            USING (realm_id = (SELECT nullif(current_setting('appdor.realm_id', true), '')::uuid))
            WITH CHECK (realm_id = (SELECT nullif(current_setting('appdor.realm_id', true), '')::uuid))$p$, t);
    END LOOP;

    ALTER TABLE realms ENABLE ROW LEVEL SECURITY;
    ALTER TABLE realms FORCE ROW LEVEL SECURITY;
    CREATE POLICY realm_isolation ON realms
        USING (id = (SELECT nullif(current_setting('appdor.realm_id', true), '')::uuid))
        WITH CHECK (id = (SELECT nullif(current_setting('appdor.realm_id', true), '')::uuid));

    -- Authentication must find a token, a membership or a realm before it knows
    -- the realm. Only the serving role (the one that migrates and owns the
    -- tables) may, and only outside appdor_tenant: tenant transactions switch
    -- role first, so this policy never applies inside them. Grid tables get no
    -- such policy: outside a tenant transaction they show nothing to anyone.
    FOREACH t IN ARRAY ARRAY['realms', 'memberships', 'api_tokens', 'token_limits', 'audit_log'] LOOP
        EXECUTE format('CREATE POLICY appdor_service ON %I TO %I USING (true) WITH CHECK (true)', t, current_user);
    END LOOP;
END
$$;

-- The tenant role owns nothing and holds only what the API needs.
GRANT USAGE ON SCHEMA public TO appdor_tenant;
GRANT SELECT ON realms, memberships TO appdor_tenant;
GRANT SELECT, INSERT, UPDATE ON api_tokens, token_limits TO appdor_tenant;
GRANT DELETE ON token_limits TO appdor_tenant;
GRANT SELECT, INSERT, UPDATE, DELETE ON apps, tables, fields, rows TO appdor_tenant;
GRANT SELECT, INSERT ON audit_log TO appdor_tenant;
