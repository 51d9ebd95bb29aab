-- Per-tenant fusion defaults for /v1/retrieve (issue 22): a NULL column falls back to the
-- server's settings ([retrieve] rrf_k, dense_weight, lexical_weight, candidates); a request's
-- own "fusion" overrides both.
CREATE TABLE tenant_fusion (
    tenant_id          text PRIMARY KEY REFERENCES tenants ON DELETE CASCADE,
    method             text CHECK (method IN ('rrf', 'convex')),
    rrf_k              integer CHECK (rrf_k BETWEEN 1 AND 10000),
    dense_weight       double precision CHECK (dense_weight >= 0 AND dense_weight <= 1000),
    lexical_weight     double precision CHECK (lexical_weight >= 0 AND lexical_weight <= 1000),
    dense_candidates   integer CHECK (dense_candidates BETWEEN 1 AND 2000),
    lexical_candidates integer CHECK (lexical_candidates BETWEEN 1 AND 2000),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    updated_by         text NOT NULL
);
