-- The role appdor_tenant is left in place: roles belong to the whole cluster,
-- and other Appdor databases on it may still use the role.
DROP TABLE IF EXISTS audit_log, rows, fields, tables, apps, sessions, token_limits, api_tokens, memberships, users, realms;
REVOKE USAGE ON SCHEMA public FROM appdor_tenant;
