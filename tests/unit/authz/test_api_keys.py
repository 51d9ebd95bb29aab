from __future__ import annotations

import hashlib

from authz.api_keys import hash_token, parse_token, verify_token
from catalog.db import redact


def test_hash_is_sha256_of_the_whole_token() -> None:
    token = "rl_0123456789ab_" + "A" * 43
    assert hash_token(token) == hashlib.sha256(token.encode()).digest()
    assert verify_token(token, hash_token(token))
    assert not verify_token(token[:-1] + "B", hash_token(token))


def test_parse_token_accepts_only_well_formed_keys() -> None:
    assert parse_token("rl_0123456789ab_" + "A" * 43) == "0123456789ab"
    for bad in ["", "rl_", "rl_0123456789ab_short", "xx_0123456789ab_" + "A" * 43, "rl_ZZZZ_" + "A" * 43]:
        assert parse_token(bad) is None


def test_redact_hides_passwords() -> None:
    assert "secret" not in redact("postgresql://u:secret@h/db")
    assert "secret" not in redact("host=h password=secret dbname=x")
