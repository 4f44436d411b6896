"""Pure helpers of the benchmarks, on literal numbers."""

from bench.ingest_scaling import busy_fraction


def test_the_busy_share_of_the_cores_between_two_readings():
    assert busy_fraction((100, 1000), (190, 1100)) == 0.9
    assert busy_fraction((100, 1000), (100, 1000)) == 0.0
