-- ragline catalog: the system of record. Index files are derived from these tables.

CREATE TABLE tenants (
    tenant_id   text PRIMARY KEY CHECK (tenant_id ~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Principals are 'user:<id>' or 'service:<id>'; groups are 'group:<id>'.
CREATE TABLE principals (
    tenant_id     text NOT NULL REFERENCES tenants ON DELETE CASCADE,
    principal_id  text NOT NULL CHECK (principal_id ~ '^(user|service):.+$'),
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, principal_id)
);

CREATE TABLE group_members (
    tenant_id     text NOT NULL,
    principal_id  text NOT NULL,
    group_id      text NOT NULL CHECK (group_id ~ '^group:.+$'),
    PRIMARY KEY (tenant_id, principal_id, group_id),
    FOREIGN KEY (tenant_id, principal_id) REFERENCES principals ON DELETE CASCADE
);

-- Only a SHA-256 of the secret is stored; key_id is the public, non-secret part.
CREATE TABLE api_keys (
    key_id        text PRIMARY KEY,
    tenant_id     text NOT NULL REFERENCES tenants ON DELETE CASCADE,
    principal_id  text NOT NULL,
    key_hash      bytea NOT NULL,
    roles         text[] NOT NULL CHECK (roles <@ ARRAY['ingest', 'query', 'admin']::text[]
                                         AND cardinality(roles) > 0),
    can_delegate  boolean NOT NULL DEFAULT false,
    name          text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,
    revoked_at    timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

-- Every catalog mutation that changes what a search may return appends here (in the same
-- transaction, under an advisory lock so positions become visible in order) and NOTIFYs
-- 'ragline_changes'; serving nodes catch up by position.
CREATE TABLE catalog_changes (
    seq         bigserial PRIMARY KEY,
    tenant_id   text NOT NULL,
    doc_id      bigint,
    kind        text NOT NULL CHECK (kind IN ('version', 'delete', 'acl', 'groups', 'alias')),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- A chunk is visible iff its document is active, the chunk belongs to the document's
-- current_version and the document's ACL admits the caller: a delete, ACL change or version
-- swap is one UPDATE of this row away from taking effect everywhere.
CREATE TABLE documents (
    doc_id           bigserial PRIMARY KEY,
    tenant_id        text NOT NULL REFERENCES tenants ON DELETE CASCADE,
    external_id      text NOT NULL CHECK (length(external_id) BETWEEN 1 AND 512),
    source           text,
    title            text,
    mime_type        text NOT NULL,
    content_hash     text,
    current_version  integer,
    metadata         jsonb NOT NULL DEFAULT '{}'::jsonb,
    acl_principals   text[] NOT NULL DEFAULT '{}',
    acl_public       boolean NOT NULL DEFAULT false,
    state            text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'deleted')),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, external_id)
);
CREATE INDEX documents_acl ON documents USING gin (acl_principals);

CREATE TABLE document_versions (
    doc_id        bigint NOT NULL REFERENCES documents ON DELETE CASCADE,
    version       integer NOT NULL CHECK (version > 0),
    content_hash  text NOT NULL,
    byte_size     bigint NOT NULL DEFAULT 0,
    page_count    integer NOT NULL DEFAULT 0,
    chunk_count   integer NOT NULL DEFAULT 0,
    warnings      text[] NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (doc_id, version)
);

-- chunk_row is the int64 id every index uses; chunk_id is the deterministic content id.
CREATE TABLE chunks (
    chunk_row     bigserial PRIMARY KEY,
    chunk_id      text NOT NULL UNIQUE,
    doc_id        bigint NOT NULL REFERENCES documents ON DELETE CASCADE,
    version       integer NOT NULL,
    ordinal       integer NOT NULL,
    level         smallint NOT NULL DEFAULT 0,
    parent_row    bigint REFERENCES chunks ON DELETE CASCADE,
    text          text NOT NULL,
    char_start    integer NOT NULL,
    char_end      integer NOT NULL,
    page_start    integer,
    page_end      integer,
    section_path  text[] NOT NULL DEFAULT '{}',
    kind          text NOT NULL DEFAULT 'paragraph',
    token_count   integer NOT NULL,
    UNIQUE (doc_id, version, ordinal),
    FOREIGN KEY (doc_id, version) REFERENCES document_versions ON DELETE CASCADE
);
CREATE INDEX chunks_doc_version ON chunks (doc_id, version);

-- Keyed by (chunk, model): rebuilds never re-embed, and a re-embed with a new model writes a
-- second set beside the live one. Vectors are little-endian float32.
CREATE TABLE chunk_embeddings (
    chunk_row  bigint NOT NULL REFERENCES chunks ON DELETE CASCADE,
    model      text NOT NULL,
    dim        integer NOT NULL CHECK (dim > 0),
    vector     bytea NOT NULL CHECK (length(vector) = 4 * dim),
    PRIMARY KEY (chunk_row, model)
);

-- Written in the same transaction that hides a chunk; drives rebuild decisions.
CREATE TABLE tombstones (
    chunk_row   bigint PRIMARY KEY REFERENCES chunks ON DELETE CASCADE,
    doc_id      bigint NOT NULL,
    reason      text NOT NULL CHECK (reason IN ('deleted', 'superseded')),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tombstones_doc ON tombstones (doc_id);

CREATE TABLE jobs (
    job_id               uuid PRIMARY KEY,
    tenant_id            text NOT NULL REFERENCES tenants ON DELETE CASCADE,
    kind                 text NOT NULL CHECK (kind IN ('ingest', 'rebuild', 'reembed')),
    state                text NOT NULL DEFAULT 'queued' CHECK (state IN (
                             'queued', 'running', 'succeeded', 'failed', 'partially_failed',
                             'cancelled')),
    params               jsonb NOT NULL DEFAULT '{}'::jsonb,
    documents_total      integer NOT NULL DEFAULT 0,
    documents_done       integer NOT NULL DEFAULT 0,
    documents_failed     integer NOT NULL DEFAULT 0,
    documents_unchanged  integer NOT NULL DEFAULT 0,
    pages                bigint NOT NULL DEFAULT 0,
    chunks               bigint NOT NULL DEFAULT 0,
    bytes                bigint NOT NULL DEFAULT 0,
    cancel_requested     boolean NOT NULL DEFAULT false,
    error                text,
    owner                text,
    heartbeat_at         timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    started_at           timestamptz,
    finished_at          timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX jobs_state ON jobs (state, created_at);

-- One row per pushed document. The payload stays here (or at payload_path for uploads and
-- the file connector) until the item is done, so a resumed job can redo it.
CREATE TABLE job_items (
    job_id          uuid NOT NULL REFERENCES jobs ON DELETE CASCADE,
    item_no         integer NOT NULL,
    external_id     text NOT NULL,
    mime_type       text NOT NULL,
    title           text,
    metadata        jsonb NOT NULL DEFAULT '{}'::jsonb,
    acl_principals  text[] NOT NULL DEFAULT '{}',
    acl_public      boolean NOT NULL DEFAULT false,
    payload         bytea,
    payload_path    text,
    byte_size       bigint NOT NULL DEFAULT 0,
    state           text NOT NULL DEFAULT 'pending' CHECK (state IN (
                        'pending', 'succeeded', 'unchanged', 'failed', 'cancelled')),
    error_code      text,
    error_message   text,
    doc_id          bigint,
    version         integer,
    chunks          integer NOT NULL DEFAULT 0,
    pages           integer NOT NULL DEFAULT 0,
    warnings        text[] NOT NULL DEFAULT '{}',
    finished_at     timestamptz,
    PRIMARY KEY (job_id, item_no)
);

CREATE TABLE index_versions (
    version_id        text PRIMARY KEY,
    state             text NOT NULL CHECK (state IN ('building', 'ready', 'failed', 'deleted')),
    path              text NOT NULL,
    embedding_model   text NOT NULL,
    dim               integer NOT NULL,
    n_shards          integer NOT NULL,
    chunk_count       bigint NOT NULL DEFAULT 0,
    catalog_position  bigint NOT NULL DEFAULT 0,
    params            jsonb NOT NULL DEFAULT '{}'::jsonb,
    error             text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    built_at          timestamptz,
    retired_at        timestamptz
);

CREATE TABLE index_aliases (
    alias             text PRIMARY KEY,
    version_id        text NOT NULL REFERENCES index_versions,
    previous_version  text REFERENCES index_versions,
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE audit_log (
    seq        bigserial PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    tenant_id  text,
    actor      text NOT NULL,
    action     text NOT NULL,
    target     text,
    details    jsonb NOT NULL DEFAULT '{}'::jsonb
);

CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only';
END $$;
CREATE TRIGGER audit_log_no_update BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
