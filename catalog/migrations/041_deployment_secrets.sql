-- Secrets every replica and worker of one deployment must share (the chunk id key): kept in
-- the catalog they all reach, generated on first use, never returned by any API.
CREATE TABLE deployment_secrets (
    name        text PRIMARY KEY,
    secret      bytea NOT NULL CHECK (length(secret) >= 32),
    created_at  timestamptz NOT NULL DEFAULT now()
);
