"""Benchmarks (`make bench`): figures go to bench/results/ as JSON plus a Markdown summary."""
