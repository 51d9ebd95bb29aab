"""The sitemap connector against a site served in the test and a real ragline server: pages
with ``<lastmod>`` are not fetched again while it stands still, a changed page is one new
version, a page dropped from the sitemap is deleted, a sitemap index is followed; a page or
a sitemap that cannot be fetched fails alone and deletes nothing.
One server for the module, a tenant per test (``live_tenant``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ragline_client import AclIn, Client, Syncer
from ragline_client.sitemap import SitemapConnector, SitemapError
from testkit.site import StaticSite
from tests.integration.client.conftest import LiveServer

pytestmark = pytest.mark.integration


# The site runs on loopback, which the connector refuses unless the operator allows it.
LOOPBACK = ["127.0.0.0/8"]


@pytest.fixture
def site() -> Iterator[StaticSite]:
    with StaticSite() as s:
        yield s


def test_sitemap_sync(live_tenant: LiveServer, site: StaticSite) -> None:
    site.pages["/vpn.html"] = (
        "text/html",
        b"<h1>VPN</h1><p>Install the wireguard profile from the portal.</p>",
    )
    site.pages["/parking.html"] = ("text/html; charset=utf-8", b"<p>Visitors park on level two.</p>")
    site.pages["/faq.txt"] = ("text/plain", b"Expense claims are due by the fifth of each month.")
    site.sitemap({"/vpn.html": "2026-01-01", "/parking.html": "2026-01-01", "/faq.txt": None})
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    reader = Client(live_tenant.url, live_tenant.key("query", principal="user:zed"))
    with httpx.Client() as http:
        connector = SitemapConnector(
            f"{site.url}/sitemap.xml", name="site", acl=AclIn(public=True), http=http, allow_networks=LOOPBACK
        )
        first = Syncer(client, connector).run().summary()
        assert (first["pushed"], first["unchanged"], first["deleted"], first["failed"]) == (3, 0, 0, 0)
        site.hits.clear()
        assert Syncer(client, connector).run().pushed == 0
        # Unchanged: the sitemaps and the page without lastmod are read, no other page.
        assert set(site.hits) == {"/sitemap.xml", "/pages.xml", "/faq.txt"}

        site.pages["/vpn.html"] = ("text/html", b"<h1>VPN</h1><p>Use the new openvpn profile instead.</p>")
        site.sitemap({"/vpn.html": "2026-02-01", "/faq.txt": None})  # parking dropped
        report = Syncer(client, connector).run()
        assert report.summary() == {
            "pushed": 1,
            "unchanged": 1,
            "deleted": 1,
            "acl_updated": 0,
            "groups_synced": 0,
            "failed": 0,
            "still_failing": 0,
        }
        assert live_tenant.versions(f"{site.url}/vpn.html") == 2
        hits = [r.document_external_id for r in reader.retrieve("where do visitors park").results]
        assert f"{site.url}/parking.html" not in hits
        assert reader.retrieve("openvpn profile").results[0].metadata["url"] == f"{site.url}/vpn.html"

        site.pages["/sitemap.xml"] = ("application/xml", b'<!DOCTYPE x [<!ENTITY a "aaaa">]><x>&a;</x>')
        with pytest.raises(SitemapError):
            Syncer(client, connector).run()


def test_a_page_that_fails_is_counted_and_the_run_goes_on(live_tenant: LiveServer, site: StaticSite) -> None:
    site.pages["/ok.html"] = ("text/html", b"<p>The badge office opens at nine on weekdays.</p>")
    site.pages["/flaky.txt"] = ("text/plain", b"The flaky page about printer toner.")
    # /gone.html (lastmod) and /missing.txt (no lastmod: fetched while listing) answer 404.
    site.sitemap(
        {"/ok.html": "2026-01-01", "/gone.html": "2026-01-01", "/missing.txt": None, "/flaky.txt": None}
    )
    client = Client(live_tenant.url, live_tenant.key("ingest"))
    with httpx.Client() as http:
        connector = SitemapConnector(
            f"{site.url}/sitemap.xml",
            name="site-404",
            acl=AclIn(public=True),
            http=http,
            allow_networks=LOOPBACK,
        )
        report = Syncer(client, connector).run()
        assert (report.pushed, report.failed) == (2, 2)
        assert "404" in report.errors[f"{site.url}/gone.html"]
        assert "404" in report.errors[f"{site.url}/missing.txt"]
        assert sorted(client.connector_state("site-404").documents) == [
            f"{site.url}/flaky.txt",
            f"{site.url}/ok.html",
        ]

        # A recorded page that fails to fetch is not taken for deleted.
        del site.pages["/flaky.txt"]
        again = Syncer(client, connector).run()
        assert (again.deleted, again.failed) == (0, 3)
        assert f"{site.url}/flaky.txt" in client.connector_state("site-404").documents

        # A sitemap of the index that fails (/more.xml, 404): counted, and nothing is deleted
        # this run, though flaky.txt is no longer listed.
        site.sitemap({"/ok.html": "2026-01-01"})
        site.pages["/sitemap.xml"] = (
            "application/xml",
            (
                '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                f"<sitemap><loc>{site.url}/pages.xml</loc></sitemap>"
                f"<sitemap><loc>{site.url}/more.xml</loc></sitemap></sitemapindex>"
            ).encode(),
        )
        partial = Syncer(client, connector).run()
        assert partial.deleted == 0 and f"{site.url}/more.xml" in partial.errors
        assert f"{site.url}/flaky.txt" in client.connector_state("site-404").documents


def test_cli_sitemap_with_a_404_page_prints_json_and_exits_3(
    live_tenant: LiveServer, site: StaticSite
) -> None:
    repo = Path(__file__).resolve().parents[3]
    site.pages["/ok.html"] = ("text/html", b"<p>The badge office opens at nine on weekdays.</p>")
    site.sitemap({"/ok.html": "2026-01-01", "/gone.html": "2026-01-01"})
    env = {
        **os.environ,
        "PYTHONPATH": str(repo),
        "RAGLINE_API_URL": live_tenant.url,
        "RAGLINE_API_KEY": live_tenant.key("ingest"),
    }
    argv = [
        sys.executable,
        "-m",
        "cli.main",
        "connect",
        "sitemap",
        f"{site.url}/sitemap.xml",
        "--tenant",
        live_tenant.tenant,
        "--allow-network",
        "127.0.0.0/8",
    ]
    run = subprocess.run(
        [*argv, "--public", "--json"],
        env=env,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert run.returncode == 3, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {
        "pushed": 1,
        "unchanged": 0,
        "deleted": 0,
        "acl_updated": 0,
        "groups_synced": 0,
        "failed": 1,
        "still_failing": 0,
        "warnings": {"documents": 0, "shown": {}},
    }
    assert f"failed {site.url}/gone.html" in run.stderr and "404" in run.stderr
    # Readers must be named: neither --acl nor --public is an error before anything is fetched.
    bare = subprocess.run(argv, env=env, cwd=repo, capture_output=True, text=True, timeout=60, check=False)
    assert bare.returncode == 2 and "one of the arguments --acl --public is required" in bare.stderr
    # Without --allow-network the loopback site is refused before any request reaches it.
    site.hits.clear()
    refused = subprocess.run(
        [*argv[:-2], "--public"], env=env, cwd=repo, capture_output=True, text=True, timeout=60, check=False
    )
    assert refused.returncode == 2 and "127.0.0.1 is a loopback address" in refused.stderr, refused.stderr
    assert not site.hits
