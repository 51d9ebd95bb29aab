-- A tenant's own reranker (issue 22): on for the tenant only when its gate passed (nDCG@10 on
-- the tenant's judged queries with it no worse than without, ``ragline reranker gate``). A
-- row that is not enabled keeps reranking off for the tenant, whatever the server's
-- [rerank] model; no row: the server's model, if any, as before. ``gate`` is the last gate's
-- report (nDCG@10 without/with, the mean difference and its 95% interval, queries, sources);
-- NULL where an operator turned it off without a gate.
CREATE TABLE tenant_reranker (
    tenant_id  text PRIMARY KEY REFERENCES tenants ON DELETE CASCADE,
    model      text,
    enabled    boolean NOT NULL,
    gate       jsonb,
    decided_at timestamptz NOT NULL DEFAULT now(),
    decided_by text NOT NULL,
    CHECK (NOT enabled OR model IS NOT NULL)
);
-- A change of the row is a change of its own kind: serving nodes drop their cached copy when
-- they catch up with it, as for the tenant's fusion defaults.
ALTER TABLE catalog_changes DROP CONSTRAINT IF EXISTS catalog_changes_kind_check;
ALTER TABLE catalog_changes ADD CONSTRAINT catalog_changes_kind_check
    CHECK (kind IN ('version', 'delete', 'acl', 'groups', 'alias', 'metadata', 'fusion', 'reranker'));
