"""``ragline ingest`` validates what the API validates, reports what it skips, and its exit
codes tell success, partial failure and failure apart."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from catalog import jobs as jobs_repo
from cli.main import main

pytestmark = pytest.mark.integration


def _jobs(url: str) -> list[jobs_repo.JobRow]:
    with psycopg.connect(url) as conn:
        return jobs_repo.list_jobs(conn, tenant_id=None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--acl", "eng"], "ACL entry 'eng'"),
        (["--acl", "group: ops"], "ACL entry 'group: ops'"),
        (["--public", "--metadata", "source"], "metadata 'source' must be KEY=VALUE"),
        (["--public", "--metadata", "bad key=x"], "metadata key 'bad key'"),
        ([], "say who may read the documents: --acl READERS, --public"),
    ],
)
def test_bad_acl_and_metadata_are_refused_before_any_job(
    argv: list[str], message: str, cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.md").write_text("# A\n\nalpha")
    code = main(["ingest", str(tmp_path / "a.md"), "--tenant", "acme", "--no-ray", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err
    assert _jobs(cli_env) == []


def test_skipped_files_are_named(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], embedder: object
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "keep.md").write_text("# Keep\n\nkept text")
    (docs / "archive.zip").write_bytes(b"PK\x03\x04....")
    (docs / "legacy.doc").write_bytes(b"\xd0\xcf\x11\xe0....")
    code = main(["ingest", str(docs), "--tenant", "acme", "--no-ray", "--public"])
    err = capsys.readouterr().err
    assert code == 0
    assert "skipped 2 files with an unsupported type" in err
    assert "archive.zip" in err and "legacy.doc" in err


def test_partially_failed_has_its_own_exit_code(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], embedder: object
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "good.md").write_text("# Good\n\nfine text")
    (docs / "empty.txt").write_text("   \n")
    code = main(["ingest", str(docs), "--tenant", "acme", "--no-ray", "--public"])
    out = capsys.readouterr().out
    assert "partially_failed" in out
    assert code == 3


def _ingested(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT external_id FROM job_items ORDER BY external_id").fetchall()
    return [r[0] for r in rows]


def test_hidden_files_are_skipped_and_named(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], embedder: object
) -> None:
    docs = tmp_path / "docs"
    (docs / ".git").mkdir(parents=True)
    (docs / "sub" / ".cache").mkdir(parents=True)
    (docs / "notes.md").write_text("# Notes\n\nmeeting notes")
    (docs / ".env.txt").write_text("DATABASE_PASSWORD=hunter2")
    (docs / ".hidden.md").write_text("# Hidden\n\nprivate")
    (docs / ".git" / "description.txt").write_text("repo")
    (docs / "sub" / "guide.txt").write_text("the guide")
    (docs / "sub" / ".cache" / "page.html").write_text("<p>cached</p>")
    code = main(["ingest", str(docs), "--tenant", "acme", "--no-ray", "--public"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert _ingested(cli_env) == ["notes.md", "sub/guide.txt"]
    assert "skipped 4 hidden files and folders" in err
    assert ".env.txt" in err and ".git/" in err and "sub/.cache/" in err


def test_include_and_exclude_globs(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], embedder: object
) -> None:
    docs = tmp_path / "docs"
    for rel in ("a.md", "drafts/b.md", "c.txt", ".notes/d.md", ".env.txt"):
        (docs / rel).parent.mkdir(parents=True, exist_ok=True)
        (docs / rel).write_text(f"# {rel}\n\ntext of {rel}")
    argv = ["ingest", str(docs), "--tenant", "acme", "--no-ray", "--public"]
    code = main([*argv, "--include", "*.md", "--include", ".notes/**", "--exclude", "drafts/"])
    err = capsys.readouterr().err
    assert code == 0, err
    # *.md alone does not take a hidden .md; .notes/** names the dot-folder, so it does.
    assert _ingested(cli_env) == [".notes/d.md", "a.md"]
    assert "skipped 2 files by --include/--exclude: c.txt, drafts/b.md" in err
    assert "skipped 1 hidden files and folders" in err and ".env.txt" in err


def test_bad_paths_and_flags_exit_2_before_any_job(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "a.md").write_text("# A\n\nalpha")
    assert main(["ingest", str(tmp_path / "nonexistent"), "--tenant", "acme", "--public"]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert main(["ingest", str(tmp_path / "empty"), "--tenant", "acme", "--public"]) == 2
    assert "no file to ingest" in capsys.readouterr().err
    with pytest.raises(SystemExit) as both:
        main(["ingest", str(tmp_path / "a.md"), "--tenant", "acme", "--acl", "group:eng", "--public"])
    assert both.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert _jobs(cli_env) == []


def test_an_acl_map_entry_without_readers_is_warned_about(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], embedder: object
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "open.md").write_text("# Open\n\nfor everyone")
    (docs / "locked.md").write_text("# Locked\n\nfor nobody")
    acl_map = tmp_path / "map.json"
    acl_map.write_text('{"open.md": {"public": true}, "locked.md": {"principals": []}}')
    code = main(["ingest", str(docs), "--tenant", "acme", "--no-ray", "--acl-map", str(acl_map)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "warning: 1 documents have no readers" in err and "locked.md" in err


def test_resume_runs_a_cancelled_job_as_the_api_does(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], embedder: object
) -> None:
    from core.records import Acl

    with psycopg.connect(cli_env) as conn:
        conn.execute("INSERT INTO tenants (tenant_id) VALUES ('acme') ON CONFLICT DO NOTHING")
        job_id = jobs_repo.create_job(
            conn,
            tenant_id="acme",
            kind="ingest",
            items=[
                jobs_repo.NewItem(
                    external_id="r.txt", mime_type="text/plain", payload=b"resumed text", acl=Acl((), True)
                )
            ],
        )
        cancelled = jobs_repo.request_cancel(conn, job_id=job_id, tenant_id=None)
        assert cancelled is not None and cancelled.state == "cancelled"
    assert main(["jobs", "resume", str(job_id)]) == 0, capsys.readouterr().err
    assert "succeeded" in capsys.readouterr().out
    with psycopg.connect(cli_env) as conn:
        job = jobs_repo.get_job(conn, job_id=job_id)
    assert job is not None and (job.state, job.documents_done) == ("succeeded", 1)
    # Nothing left to run: refused, as the API answers 409.
    assert main(["jobs", "resume", str(job_id)]) == 1
    assert "has no items left to run" in capsys.readouterr().err


def test_no_file_outside_the_folder_is_read_through_a_link(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], embedder: object
) -> None:
    marker = "PGPASSFILE-MARKER-51c2"
    outside = tmp_path / "outside"
    (outside / "keys").mkdir(parents=True)
    (outside / "pgpass.txt").write_text(f"localhost:5432:*:ragline:{marker}\n")
    (outside / "keys" / "id.md").write_text(f"# Key\n\n{marker}\n")
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "notes.md").write_text("# Notes\n\nmeeting notes")
    (docs / "pgpass.txt").symlink_to(outside / "pgpass.txt")
    (docs / "sub" / "twin.md").symlink_to(docs / "notes.md")  # inside: taken under its own path
    (docs / "keys").symlink_to(outside / "keys", target_is_directory=True)
    code = main(["ingest", str(docs), "--tenant", "acme", "--no-ray", "--public"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert _ingested(cli_env) == ["notes.md"]
    assert "skipped 3 symbolic links (never followed" in err
    assert "pgpass.txt" in err and "keys/" in err and "sub/twin.md" in err
    with psycopg.connect(cli_env) as conn:
        leaked = conn.execute("SELECT count(*) FROM chunks WHERE strpos(text, %s) > 0", (marker,)).fetchone()
    assert leaked == (0,)
    # A link the shell names (``ragline ingest docs/*``) is skipped too: nothing left to ingest.
    code = main(["ingest", str(docs / "pgpass.txt"), "--tenant", "acme", "--no-ray", "--public"])
    err = capsys.readouterr().err
    assert code == 2 and "no file to ingest" in err
    assert f"are read): {docs / 'pgpass.txt'}\n" in err  # named by its own path, not "."
