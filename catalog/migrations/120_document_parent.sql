-- An e-mail's attachments are documents of their own (`<message id>#attachment=N`); each
-- records the message it came from, so a re-push replaces the message's attachment set, a
-- delete of the message deletes them and an ACL change of the message reaches them. NULL:
-- a document of its own. A purged message leaves its (already deleted) attachments unlinked.
ALTER TABLE documents ADD COLUMN parent_doc_id bigint REFERENCES documents (doc_id) ON DELETE SET NULL;
CREATE INDEX documents_parent_idx ON documents (parent_doc_id) WHERE parent_doc_id IS NOT NULL;
