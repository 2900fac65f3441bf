-- Administration from the browser: the first run's setup, members, invites,
-- operators, and the audit of sign-ins.
--
-- The serving role still reads people only by key, and a tenant transaction
-- still sees only its realm. What needs more runs in the functions below,
-- SECURITY DEFINER as the schema's owner, each doing one narrow thing: the
-- realm they act in is the tenant transaction's own (appdor.realm_id), never an
-- argument, so a realm's owner cannot reach another realm through them.

-- An operator administers the instance: sees every realm's name and usage,
-- never a realm's rows (RLS applies to operators as to everyone).
ALTER TABLE users ADD COLUMN operator boolean NOT NULL DEFAULT false;
ALTER TABLE users ADD COLUMN last_sign_in_at timestamptz;
GRANT SELECT (operator) ON users TO appdor_server;

-- A one-time link that lets a person added without a password set one.
CREATE TABLE invites (
    realm_id                uuid NOT NULL,
    hash                    bytea NOT NULL,
    user_id                 uuid NOT NULL,
    created_at              timestamptz NOT NULL DEFAULT now(),
    expires_at              timestamptz NOT NULL,
    PRIMARY KEY (realm_id, hash),
    FOREIGN KEY (realm_id, user_id) REFERENCES memberships (realm_id, user_id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX invites_hash_key ON invites (hash);
CREATE INDEX invites_member_idx ON invites (realm_id, user_id);
ALTER TABLE invites ENABLE ROW LEVEL SECURITY;
ALTER TABLE invites FORCE ROW LEVEL SECURITY;
CREATE POLICY realm_isolation ON invites
    USING (realm_id = (SELECT nullif(current_setting('appdor.realm_id', true), '')::uuid))
    WITH CHECK (realm_id = (SELECT nullif(current_setting('appdor.realm_id', true), '')::uuid));
DO $$ BEGIN
    EXECUTE format('CREATE POLICY appdor_owner ON invites TO %I USING (true) WITH CHECK (true)', current_user);
END $$;
GRANT SELECT, INSERT, DELETE ON invites TO appdor_tenant;

-- Owners change roles and remove members in their realm's transaction.
GRANT UPDATE (role), DELETE ON memberships TO appdor_tenant;
GRANT DELETE ON api_tokens TO appdor_tenant;

-- The audit log is read newest first, by action too.
CREATE INDEX audit_log_action_idx ON audit_log (realm_id, action, id);

-- The realm's members with their email and last sign-in, in the tenant
-- transaction's realm.
CREATE FUNCTION appdor_members()
    RETURNS TABLE (user_id uuid, email text, role text, created_at timestamptz, last_sign_in_at timestamptz, invited boolean)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
    SELECT m.user_id, u.email, m.role, m.created_at, u.last_sign_in_at,
           EXISTS (SELECT 1 FROM public.invites i WHERE i.realm_id = m.realm_id AND i.user_id = m.user_id AND i.expires_at > now())
    FROM public.memberships m JOIN public.users u ON u.id = m.user_id
    WHERE m.realm_id = (SELECT nullif(current_setting('appdor.realm_id', true), '')::uuid)
    ORDER BY lower(u.email)
    $$;

-- Adds a person to the tenant transaction's realm: the person is made when
-- the email is new (with password_hash, or none that can sign in until an
-- invite sets one), else the existing person is added and keeps their
-- password. A person already a member is a unique violation.
CREATE FUNCTION appdor_add_member(p_email text, p_password_hash text, p_role text)
    RETURNS TABLE (user_id uuid, email text, existing boolean)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
DECLARE
    realm uuid := (SELECT nullif(current_setting('appdor.realm_id', true), '')::uuid);
BEGIN
    IF realm IS NULL THEN
        RAISE EXCEPTION 'appdor_add_member outside a realm' USING ERRCODE = '42501';
    END IF;
    SELECT u.id, u.email, true INTO user_id, email, existing FROM public.users u WHERE lower(u.email) = lower(p_email);
    IF NOT FOUND THEN
        INSERT INTO public.users (email, password_hash) VALUES (p_email, coalesce(p_password_hash, '!'))
        RETURNING users.id, users.email INTO user_id, email;
        existing := false;
    END IF;
    INSERT INTO public.memberships (realm_id, user_id, role) VALUES (realm, appdor_add_member.user_id, p_role);
    RETURN NEXT;
END
$$;

-- A removed member's sessions end when they belong to no realm any more;
-- while they belong to another, their sessions lose this realm at once,
-- since every request reads the membership.
CREATE FUNCTION appdor_end_sessions_of_removed(p_user uuid) RETURNS void
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
    DELETE FROM public.sessions s
    WHERE s.user_id = p_user
      AND NOT EXISTS (SELECT 1 FROM public.memberships m WHERE m.user_id = p_user)
    $$;

-- An invite's secret (by hash) sets the password of a person who has none,
-- once; the answer is the person and the realm, or nothing.
CREATE FUNCTION appdor_accept_invite(p_hash bytea, p_password_hash text)
    RETURNS TABLE (user_id uuid, email text, realm_id uuid)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
BEGIN
    DELETE FROM public.invites i WHERE i.hash = p_hash AND i.expires_at > now()
    RETURNING i.user_id, i.realm_id INTO user_id, realm_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE public.users u SET password_hash = p_password_hash, last_sign_in_at = now()
    WHERE u.id = appdor_accept_invite.user_id AND u.password_hash = '!'
    RETURNING u.email INTO email;
    IF NOT FOUND THEN
        RETURN; -- set meanwhile: the invite is spent and changes nothing
    END IF;
    INSERT INTO public.audit_log (realm_id, actor, action, detail)
    VALUES (appdor_accept_invite.realm_id, 'user:' || appdor_accept_invite.user_id, 'invite_accepted',
            jsonb_build_object('email', email));
    RETURN NEXT;
END
$$;

-- A sign-in (ok) or a failed one of a known person, in the audit log of each
-- of their realms; a successful one is their last sign-in.
CREATE FUNCTION appdor_audit_sign_in(p_user uuid, p_ok boolean, p_address text) RETURNS void
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
    UPDATE public.users SET last_sign_in_at = now() WHERE id = p_user AND p_ok;
    INSERT INTO public.audit_log (realm_id, actor, action, detail)
    SELECT m.realm_id, 'user:' || u.id, CASE WHEN p_ok THEN 'sign_in' ELSE 'sign_in_failed' END,
           jsonb_build_object('email', u.email, 'address', p_address)
    FROM public.memberships m JOIN public.users u ON u.id = m.user_id
    WHERE m.user_id = p_user;
    $$;

-- The first run: with nobody there yet, makes the first realm and its owner,
-- an operator. With anyone there it makes nothing and answers no row.
CREATE FUNCTION appdor_setup(p_realm text, p_email text, p_password_hash text)
    RETURNS TABLE (realm_id uuid, user_id uuid)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('appdor_setup'));
    IF EXISTS (SELECT 1 FROM public.users) THEN
        RETURN;
    END IF;
    INSERT INTO public.realms (name) VALUES (p_realm) RETURNING id INTO realm_id;
    INSERT INTO public.users (email, password_hash, operator, last_sign_in_at) VALUES (p_email, p_password_hash, true, now())
    RETURNING id INTO user_id;
    INSERT INTO public.memberships (realm_id, user_id, role) VALUES (appdor_setup.realm_id, appdor_setup.user_id, 'owner');
    INSERT INTO public.audit_log (realm_id, actor, action, detail)
    VALUES (appdor_setup.realm_id, 'user:' || appdor_setup.user_id, 'setup', jsonb_build_object('email', p_email));
    RETURN NEXT;
END
$$;

-- Every realm's id and name, for an operator's usage page; nothing for
-- anyone else. Names only: no realm's rows, members or tokens.
CREATE FUNCTION appdor_operator_realms(p_user uuid)
    RETURNS TABLE (id uuid, name text, created_at timestamptz)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$
    SELECT r.id, r.name, r.created_at FROM public.realms r
    WHERE EXISTS (SELECT 1 FROM public.users u WHERE u.id = p_user AND u.operator)
    ORDER BY lower(r.name), r.id
    $$;

DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['appdor_members()', 'appdor_add_member(text, text, text)',
                             'appdor_end_sessions_of_removed(uuid)', 'appdor_accept_invite(bytea, text)',
                             'appdor_audit_sign_in(uuid, boolean, text)', 'appdor_setup(text, text, text)',
                             'appdor_operator_realms(uuid)'] LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;
-- In a realm's transaction:
GRANT EXECUTE ON FUNCTION appdor_members(), appdor_add_member(text, text, text),
    appdor_end_sessions_of_removed(uuid) TO appdor_tenant;
-- Outside any realm, as the serving role:
GRANT EXECUTE ON FUNCTION appdor_accept_invite(bytea, text), appdor_audit_sign_in(uuid, boolean, text),
    appdor_setup(text, text, text), appdor_operator_realms(uuid) TO appdor_server;
