"""Benchmarks behind ``vlrl bench``: each compares a vlrl mechanism with its naive baseline in the
same run and reports the ratio (timings on shared machines are noisy; ratios are what count)."""
