"""Benchmarks and measurements of tlc: development tooling, not part of the
installed package (setup.py packages tlc and testbed only). Run each from the
project root as a module, `python3 -m benchmarks.bench_codecs`; the tests
import them as `from benchmarks import bench_codecs`."""
