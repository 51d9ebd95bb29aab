from __future__ import annotations

from index.capacity import estimate_capacity, format_report


def test_sizes_per_kind_and_swap_room() -> None:
    report = estimate_capacity(1_000_000, 384, kind="hnsw", hnsw_m=32, pq_m=48, pq_nbits=8)
    assert report.raw_vector_bytes == report.flat_index_bytes == 1_000_000 * 384 * 4
    assert report.ivfpq_index_bytes < report.flat_index_bytes < report.hnsw_index_bytes
    # HNSW M=32: 64 level-0 links of 4 bytes per vector on top of the floats.
    assert 256 * 10**6 < report.hnsw_index_bytes - report.flat_index_bytes < 300 * 10**6
    assert report.serve_ram_bytes == report.index_bytes + report.raw_vector_bytes + report.row_id_bytes
    assert report.swap_extra_bytes == report.serve_ram_bytes
    assert "RAM to serve" in format_report(report)


def test_ivfpq_codes_dominate_at_scale() -> None:
    report = estimate_capacity(10_000_000, 384, kind="ivfpq", pq_m=48, pq_nbits=8)
    assert report.index_bytes == report.ivfpq_index_bytes
    assert 10_000_000 * 56 <= report.index_bytes < 10_000_000 * 60
