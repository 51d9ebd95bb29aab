-- When chunk text was last purged: a live index version built before it still holds the
-- purged text in its files, so the maintenance tick rebuilds it (durably, across failures).
CREATE TABLE purge_state (
    singleton       boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    last_purged_at  timestamptz NOT NULL
);
