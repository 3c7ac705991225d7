"""Benchmarks of search strategies and cost models on replayed measured spaces."""
