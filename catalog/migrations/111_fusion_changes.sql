-- A tenant's fusion defaults change under their own change kind, so every serving node drops
-- its cached copy when it catches up (as for groups), instead of reading the row per request.
ALTER TABLE catalog_changes DROP CONSTRAINT IF EXISTS catalog_changes_kind_check;
ALTER TABLE catalog_changes ADD CONSTRAINT catalog_changes_kind_check
    CHECK (kind IN ('version', 'delete', 'acl', 'groups', 'alias', 'metadata', 'fusion'));
