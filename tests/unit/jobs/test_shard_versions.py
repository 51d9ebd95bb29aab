"""One fan-out answer never mixes index versions: the served version's lists win, else the
most common version's, and every server left out is named in ``degraded``."""

from __future__ import annotations

from core.records import Hit
from jobs.shard_servers import ShardAnswer, _one_version


def _answer(version: str, chunk: int) -> ShardAnswer:
    return ShardAnswer(version, [Hit(chunk, 1.0, "dense")], [])


def test_one_version_keeps_every_answer() -> None:
    answers = [(0, _answer("v1", 1)), (1, _answer("v1", 2))]
    kept, other = _one_version(answers, "v1")
    assert [a.dense[0].chunk_id for a in kept] == [1, 2] and other == []


def test_the_served_version_wins_over_a_server_that_moved_on() -> None:
    answers = [(0, _answer("v2", 1)), (1, _answer("v1", 2)), (2, _answer("v2", 3))]
    kept, other = _one_version(answers, "v1")
    assert [a.dense[0].chunk_id for a in kept] == [2]
    assert other == [
        {"stage": "shards", "reason": "server0 answered from version v2, not v1"},
        {"stage": "shards", "reason": "server2 answered from version v2, not v1"},
    ]


def test_without_the_served_version_the_most_common_one_answers() -> None:
    answers = [(0, _answer("v3", 1)), (1, _answer("v2", 2)), (2, _answer("v3", 3))]
    kept, other = _one_version(answers, "v1")
    assert {a.version_id for a in kept} == {"v3"} and len(kept) == 2
    assert [d["reason"] for d in other] == ["server1 answered from version v2, not v3"]
