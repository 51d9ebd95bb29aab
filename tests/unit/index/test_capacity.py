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


def test_shard_servers_split_the_serving_ram_by_their_busiest_group() -> None:
    from index.capacity import format_share, split_across_servers

    report = estimate_capacity(1_000_000, 384, kind="hnsw")
    even = split_across_servers(report, n_shards=8, n_servers=4)
    assert even.shards_per_server == 2
    assert even.server_ram_bytes == report.serve_ram_bytes // 4 == even.server_swap_extra_bytes
    uneven = split_across_servers(report, n_shards=8, n_servers=3)  # groups of 3, 3 and 2 shards
    assert uneven.shards_per_server == 3 and uneven.server_ram_bytes == report.serve_ram_bytes * 3 // 8
    more_servers = split_across_servers(report, n_shards=2, n_servers=4)  # two servers idle
    assert (
        more_servers.shards_per_server == 1 and more_servers.server_ram_bytes == report.serve_ram_bytes // 2
    )
    assert "RAM per shard server" in format_share(even)
