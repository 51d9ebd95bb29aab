"""PDF table cell accuracy per producer: PyMuPDF's ``Table.extract()`` vs the text layer's cells.

Run: ``python -m bench.pdf_tables --tables 30``. Seeded random tables (multi-word names and
headers, places with parentheses, integers with thousands separators, amounts with decimals,
negatives in parentheses, percentages, dates, and descriptions long enough to wrap) are
written as PDFs by PyMuPDF, ReportLab and fpdf2 (``testkit/table_pdfs.py``); each page's
tables are found with ``find_tables(use_layout=False)`` and their cells read two ways: the
finder's own ``extract()`` (what ``ingest/pdf.py`` did before issue 44) and
``ingest.pdf_tables.find_tables`` (the text layer's characters per cell box, what it does
now). A cell counts as right when its text, whitespace collapsed, equals the cell written;
the cells of a table not found, or found with another shape, count as wrong. The time is per
page, table finding included, alternating the two readers.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.common import print_table
from ingest.pdf_tables import find_tables
from testkit.table_pdfs import PRODUCERS

GIVEN = ["Marta", "Jean-Paul", "Li", "Ana María", "Oskar", "Fatima", "Søren", "Chidi", "Aiko", "Rahul"]
FAMILY = ["Quintero", "Ferrand", "Wei", "López de Arriba", "Nowak", "El Amrani", "Holm", "Okafor", "Sato"]
# Latin-1 only: the base-14 fonts of PyMuPDF and ReportLab cannot show a character outside WinAnsi.
PLACES = ["Rotterdam North", "Lyon", "Bilbao (port annex)", "São Paulo", "Malmö East", "Porto (bonded)"]
WORDS = (
    "pallets racking inbound outbound audit pending cold chain hazmat cross dock returns "
    "customs cleared seasonal overflow leased owned refurbished scheduled for review"
).split()
HEADERS = {
    "name": ["Manager", "Site lead", "Contact person"],
    "place": ["Site", "Warehouse (city)", "Location"],
    "integer": ["Capacity (pallets)", "Units shipped", "Headcount (FTE)"],
    "amount": ["Annual cost (EUR)", "Revenue (USD)", "Budget 2026"],
    "negative": ["Variance (EUR)", "Net change", "Write-off (USD)"],
    "percent": ["Utilisation", "Growth (YoY)", "Share of total"],
    "date": ["Last audit", "Opened", "Lease ends"],
    "text": ["Notes", "Description of the site", "Status and remarks"],
}


def _cell(kind: str, rng: random.Random) -> str:
    if kind == "name":
        return f"{rng.choice(GIVEN)} {rng.choice(FAMILY)}"
    if kind == "place":
        return rng.choice(PLACES)
    if kind == "integer":
        return f"{rng.randrange(10, 10 ** rng.randint(3, 7)):,}"
    if kind == "amount":
        return f"{rng.uniform(0, 10 ** rng.randint(1, 7)):,.2f}"
    if kind == "negative":
        return f"({rng.uniform(1, 100_000):,.2f})"
    if kind == "percent":
        return f"{rng.uniform(0, 100):.1f}%"
    if kind == "date":
        return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))


def _table(rng: random.Random) -> tuple[list[list[str]], list[str]]:
    kinds = ["place", *rng.sample([k for k in HEADERS if k != "place"], rng.randint(3, 5))]
    header = [rng.choice(HEADERS[kind]) for kind in kinds]
    rows = [[_cell(kind, rng) for kind in kinds] for _ in range(rng.randint(4, 9))]
    return [header, *rows], ["header", *kinds]


def _extract(page: Any) -> list[list[list[str]]]:
    found = page.find_tables(use_layout=False)
    return [[[" ".join((cell or "").split()) for cell in row] for row in t.extract()] for t in found.tables]


def _text_layer(page: Any, flags: int) -> list[list[list[str]]]:
    return [[list(row) for row in table.rows] for table in find_tables(page, flags)]


Grid = list[list[str]]


def _score(truth: Grid, kinds: list[str], tables: list[Grid], right: Counter[str]) -> None:
    """Count the cells of ``truth`` read right, by kind, in the found table of its shape."""
    got = next((t for t in tables if len(t) == len(truth) and len(t[0]) == len(truth[0])), None)
    for r, row in enumerate(truth):
        for c, cell in enumerate(row):
            if got is not None and got[r][c] == cell:
                right["header" if r == 0 else kinds[c + 1]] += 1


@dataclass(frozen=True, slots=True)
class _Result:
    cells: Counter[str]  # by kind
    right: dict[str, Counter[str]]  # by reader, then kind
    seconds: dict[str, float]  # by reader


def _run(producer: Callable[..., bytes], tables: int, seed: int) -> _Result:
    import pymupdf

    flags = int(pymupdf.TEXTFLAGS_TEXT)
    readers: dict[str, Callable[[Any], list[list[list[str]]]]] = {
        "extract": _extract,
        "text layer": lambda page: _text_layer(page, flags),
    }
    rng = random.Random(seed)
    result = _Result(Counter(), {name: Counter() for name in readers}, dict.fromkeys(readers, 0.0))
    for n in range(tables):
        truth, kinds = _table(rng)
        doc = pymupdf.open(stream=producer(truth, title=f"Table {n + 1}"))
        for r, row in enumerate(truth):
            result.cells.update("header" if r == 0 else kinds[c + 1] for c in range(len(row)))
        for name in sorted(readers, reverse=n % 2 == 1):
            started = time.perf_counter()
            found = readers[name](doc[0])
            result.seconds[name] += time.perf_counter() - started
            _score(truth, kinds, found, result.right[name])
    return result


def _percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tables", type=int, default=30, help="tables per producer")
    p.add_argument("--seed", type=int, default=44)
    args = p.parse_args()
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.tables} tables per producer")
    rows: list[list[object]] = []
    cells: Counter[str] = Counter()
    right: dict[str, Counter[str]] = {"extract": Counter(), "text layer": Counter()}
    for name, producer in PRODUCERS.items():
        result = _run(producer, args.tables, args.seed)
        total = result.cells.total()
        old, new = result.right["extract"].total(), result.right["text layer"].total()
        ms = {reader: f"{1000 * seconds / args.tables:.1f}" for reader, seconds in result.seconds.items()}
        accuracy = [_percent(old, total), _percent(new, total)]
        rows.append([name, total, *accuracy, ms["extract"], ms["text layer"]])
        cells.update(result.cells)
        for reader, counts in result.right.items():
            right[reader].update(counts)
    headers = ["producer", "cells", "extract() %", "text layer %", "ms/page extract()", "ms/page text"]
    print_table(headers, rows)
    print()
    print_table(
        ["cell kind", "cells", "extract() %", "text layer %"],
        [
            [kind, total, _percent(right["extract"][kind], total), _percent(right["text layer"][kind], total)]
            for kind, total in sorted(cells.items())
        ],
    )


if __name__ == "__main__":
    main()
