-- The deployment operator role (index versions, aliases, re-embeds, GC, deployment status),
-- apart from a tenant's admin. Existing admin keys stay tenant admins.
ALTER TABLE api_keys DROP CONSTRAINT IF EXISTS api_keys_roles_check;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_roles_check
    CHECK (roles <@ ARRAY['ingest', 'query', 'admin', 'operator']::text[] AND cardinality(roles) > 0);
