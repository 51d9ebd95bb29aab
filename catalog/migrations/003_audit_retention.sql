-- Audit retention: audit_log stays append-only for every statement except the retention GC,
-- which runs through audit_log_gc() (it sets a transaction-local flag the trigger checks).
-- This keeps accidental UPDATE/DELETE out; it is not a defence against a database owner,
-- who can drop the trigger anyway.
CREATE OR REPLACE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('ragline.audit_gc', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'audit_log is append-only';
END $$;

CREATE FUNCTION audit_log_gc(retention interval) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    removed bigint;
BEGIN
    PERFORM set_config('ragline.audit_gc', 'on', true);
    DELETE FROM audit_log WHERE at < now() - retention;
    GET DIAGNOSTICS removed = ROW_COUNT;
    PERFORM set_config('ragline.audit_gc', 'off', true);
    RETURN removed;
END $$;

CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_action_at ON audit_log (action, at);
