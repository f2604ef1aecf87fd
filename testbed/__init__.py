"""Test-bed code: slow links in network namespaces (netem), for benchmarks,
tests and the main job's --netem_rate. Not part of the library."""
