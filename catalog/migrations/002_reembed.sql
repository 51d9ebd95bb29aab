-- Model migrations (ragline reembed): at most one active at a time. While one is active,
-- ingestion writes vectors for its target model too (dual write), and rebuilds wait.
CREATE TABLE embedding_migrations (
    job_id          uuid PRIMARY KEY REFERENCES jobs ON DELETE CASCADE,
    model           text NOT NULL,
    live_model      text NOT NULL,
    chunking        text,  -- 'TOKENS/OVERLAP' when the migration re-chunks too
    state           text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'finished')),
    target_version  text,
    report          jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
CREATE UNIQUE INDEX embedding_migrations_one_active ON embedding_migrations ((true))
    WHERE state = 'active';

-- What a document version parsed to (sections with headings, pages and offsets), as
-- zlib-compressed JSON, so a later migration can re-chunk without the source.
CREATE TABLE document_texts (
    doc_id    bigint NOT NULL,
    version   integer NOT NULL,
    format    smallint NOT NULL DEFAULT 1,
    body      bytea NOT NULL,
    PRIMARY KEY (doc_id, version),
    FOREIGN KEY (doc_id, version) REFERENCES document_versions ON DELETE CASCADE
);

-- The chunk settings a version was chunked with ('TOKENS/OVERLAP'); NULL before this column.
ALTER TABLE document_versions ADD COLUMN chunking text;
