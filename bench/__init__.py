"""Benchmarks: each writes bench/results/<name>.json; REPORT.md explains them."""
