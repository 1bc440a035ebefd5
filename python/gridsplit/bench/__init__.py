"""The bench package: benchmarks and their result files."""
