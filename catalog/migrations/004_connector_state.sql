-- Per-connector sync state, so an incremental connector resumes after a restart and a second
-- run over an unchanged source sends nothing: its cursor, and per item the fingerprint it
-- recorded when the server accepted the item.
CREATE TABLE connector_state (
    tenant_id   text NOT NULL REFERENCES tenants ON DELETE CASCADE,
    connector   text NOT NULL CHECK (connector ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'),
    cursor      text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, connector)
);

-- kind 'document': item_key is an external id; kind 'groups': item_key is a principal whose
-- group list the connector synced.
CREATE TABLE connector_items (
    tenant_id    text NOT NULL,
    connector    text NOT NULL,
    kind         text NOT NULL CHECK (kind IN ('document', 'groups')),
    item_key     text NOT NULL CHECK (length(item_key) BETWEEN 1 AND 512),
    fingerprint  text NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, connector, kind, item_key),
    FOREIGN KEY (tenant_id, connector) REFERENCES connector_state ON DELETE CASCADE
);
