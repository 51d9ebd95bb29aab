-- The connector that owns a document: the one that created it, or claimed it while it was
-- unowned (NULL: written by plain API pushes or `ragline ingest` only). A connector may write
-- only documents that are new, deleted, unowned or its own, and may delete or re-ACL only its
-- own, so two connectors whose sources share an external id (two folders that both hold
-- readme.txt) can never delete or overwrite each other's documents. job_items carries the
-- pushing connector to the job's commit, which checks again under the document's row lock.
ALTER TABLE documents ADD COLUMN connector text;
ALTER TABLE job_items ADD COLUMN connector text;

-- Documents exactly one connector's sync state records are that connector's. Those two
-- connectors both record (the defect above) stay unowned: neither may delete them.
UPDATE documents d SET connector = c.connector
FROM (
    SELECT tenant_id, item_key, min(connector) AS connector
    FROM connector_items WHERE kind = 'document'
    GROUP BY tenant_id, item_key HAVING count(*) = 1
) c
WHERE d.tenant_id = c.tenant_id AND d.external_id = c.item_key;
