-- Erasure and the audit log (issue 43): a retrieve's entry keeps the query text only where
-- the deployment stores it (audit.store_query_text), and that text may quote the document
-- the search returned. An erasure removes the 'query' key from the tenant's entries that
-- returned one of the erased chunks, through audit_log_erase_queries(): the one UPDATE the
-- append-only trigger lets through, and only when removing 'query' is the whole change (who
-- asked, when, what came back and the erasure's own entry stay).
CREATE OR REPLACE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('ragline.audit_gc', true) = 'on' THEN
        RETURN OLD;
    END IF;
    IF TG_OP = 'UPDATE' AND current_setting('ragline.audit_erase', true) = 'on'
       AND (NEW.seq, NEW.at, NEW.tenant_id, NEW.actor, NEW.action, NEW.target)
           IS NOT DISTINCT FROM (OLD.seq, OLD.at, OLD.tenant_id, OLD.actor, OLD.action, OLD.target)
       AND NEW.details = OLD.details - 'query' THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit_log is append-only';
END $$;

CREATE FUNCTION audit_log_erase_queries(tenant text, erased_chunk_ids text[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    scrubbed bigint;
BEGIN
    PERFORM set_config('ragline.audit_erase', 'on', true);
    UPDATE audit_log SET details = details - 'query'
     WHERE tenant_id = tenant AND details ? 'query'
       AND jsonb_typeof(details->'chunk_ids') = 'array'
       AND details->'chunk_ids' ?| erased_chunk_ids;
    GET DIAGNOSTICS scrubbed = ROW_COUNT;
    PERFORM set_config('ragline.audit_erase', 'off', true);
    RETURN scrubbed;
END $$;
