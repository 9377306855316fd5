"""Side-by-side benchmarks; each reports ratios between competitors measured in one process."""
