-- A document's title and metadata can change without a new version (an unchanged re-push
-- after a rename): serving follows such a change like an ACL change, under its own kind.
ALTER TABLE catalog_changes DROP CONSTRAINT IF EXISTS catalog_changes_kind_check;
ALTER TABLE catalog_changes ADD CONSTRAINT catalog_changes_kind_check
    CHECK (kind IN ('version', 'delete', 'acl', 'groups', 'alias', 'metadata'));
