"""Pure parts of the git, SQL and IMAP connectors: how a source's permissions become
readers (fail closed on what cannot be named), and the query file's checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.connect_sources import owner_principal
from cli.connect_sql import SqlSpec, _principals
from core.errors import InvalidInputError
from ragline_client.connector import inherited
from ragline_client.imap_source import _unquote, folder_readers
from ragline_client.models import MAX_METADATA_KEYS, AclIn, DocumentIn


def test_imap_acl_rights_and_identifiers() -> None:
    acl = folder_readers("ann", b'"Team Notes" bob lr carol lrs dan w $eng lr ann lrwstipekxacd')
    assert _unquote(b'"Team \\"A\\""') == 'Team "A"'
    assert acl.principals == ["group:eng", "user:ann", "user:bob", "user:carol"]  # dan cannot read
    assert acl.public is False
    assert folder_readers("ann", b"Team anyone lr").public is True
    assert folder_readers("ann", b"Team authenticated lr -authenticated r").public is False
    negative = folder_readers("ann", b"Team bob lr -bob r")
    assert negative.principals == ["user:ann"]  # a negative right takes bob out
    assert folder_readers("ann", b'Team "a b" lr').principals == ["user:ann"]  # no such principal


def test_sql_readers_fail_closed() -> None:
    assert _principals(["user:ann", "group:hr", "bob", "", None]) == ["group:hr", "user:ann"]
    assert _principals("user:ann, group:hr ,nonsense") == ["group:hr", "user:ann"]
    assert _principals(None) == []


def test_sql_query_file_checks(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    path.write_text('query = "SELECT 1"\nkey = "id"\ntext = ["body"]\nacl_column = "r"\n')
    assert SqlSpec.load(path).acl_column == "r"
    for body, message in [
        ('query = "q"\nkey = "id"\ntext = ["b"]\n', "acl_column, acl_query or public"),
        ('query = "q"\nkey = "id"\ntext = []\nacl_column = "r"\n', "at least one column"),
        ('query = "q"\nkey = "id"\ntext = ["b"]\nacl_column = "r"\nacl_query = "x"\n', "exclude each other"),
        ('query = "q"\nkey = "id"\ntext = ["b"]\nacl_column = "r"\nsurprise = 1\n', "surprise"),
        ("query = [", "cannot read"),
    ]:
        path.write_text(body)
        with pytest.raises(InvalidInputError, match=message):
            SqlSpec.load(path)


def test_codeowners_owner_names() -> None:
    assert owner_principal("@ann") == "user:ann"
    assert owner_principal("@acme/payroll") == "group:acme/payroll"
    assert owner_principal("ada@example.com") == "user:ada@example.com"
    assert owner_principal("nobody") is None


def test_a_linked_document_inherits_its_parents_acl_and_metadata_within_the_key_limit() -> None:
    """The kit pushes an attachment under its message's ACL and metadata, its own keys winning;
    a parent with the most keys a document may have crowds out its own last keys, never the
    attachment's, so the pushed document still passes the server's limit."""
    filler = {f"k{i:02d}": "v" for i in range(MAX_METADATA_KEYS - 2)}
    parent = DocumentIn(external_id="m", text="body", metadata={"folder": "Inbox", "from": "ann", **filler})
    child = DocumentIn(
        external_id="m#attachment=1",
        text="x",
        metadata={"parent_external_id": "m", "folder": "Sent"},
        acl=AclIn(public=True),
    )
    pushed = inherited(parent, child, AclIn(principals=["user:ann"]))
    assert pushed.acl == AclIn(principals=["user:ann"])
    assert pushed.metadata["folder"] == "Sent" and pushed.metadata["from"] == "ann"
    assert pushed.metadata["parent_external_id"] == "m"
    last = f"k{MAX_METADATA_KEYS - 3:02d}"
    assert len(pushed.metadata) == MAX_METADATA_KEYS and last not in pushed.metadata
    DocumentIn.model_validate(pushed.model_dump())
