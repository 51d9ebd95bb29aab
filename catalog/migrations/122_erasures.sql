-- Erasure requests (``ragline purge``): which (tenant, external id) was erased and when. The
-- purge scrubs every job item of the id it can see; the write path checks this table too, so
-- an item queued before the erasure (a push racing the purge, a job resumed or retried later)
-- is settled 'erased' and never written. A push after the erasure is a new document.
CREATE TABLE erasures (
    tenant_id    text NOT NULL REFERENCES tenants ON DELETE CASCADE,
    external_id  text NOT NULL,
    erased_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, external_id)
);

-- When the item was queued (its push's transaction): compared with its id's erasure. Rows
-- older than this column get the migration's time, which precedes every erasure.
ALTER TABLE job_items ADD COLUMN queued_at timestamptz NOT NULL DEFAULT now();

-- 'erased': the item's content was erased (payload, title, metadata scrubbed); it never runs.
ALTER TABLE job_items DROP CONSTRAINT job_items_state_check;
ALTER TABLE job_items ADD CONSTRAINT job_items_state_check CHECK (state IN (
    'pending', 'succeeded', 'unchanged', 'failed', 'cancelled', 'erased'));
