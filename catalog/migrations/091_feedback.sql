-- Relevance feedback from applications (POST /v1/feedback, issue 22): one judgement of one
-- result (a chunk, or a whole document) of one retrieve, by the principal who gave it. The
-- query text is kept only when the deployment stores query text (audit.store_query_text).
CREATE TABLE feedback (
    feedback_id  bigserial PRIMARY KEY,
    tenant_id    text NOT NULL REFERENCES tenants ON DELETE CASCADE,
    principal_id text NOT NULL,
    request_id   text NOT NULL,
    doc_id       bigint NOT NULL REFERENCES documents ON DELETE CASCADE,
    chunk_id     text,
    grade        smallint NOT NULL CHECK (grade BETWEEN 0 AND 3),
    query        text,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX feedback_tenant_time ON feedback (tenant_id, created_at);
