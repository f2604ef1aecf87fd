"""Builds a C++ driver of custom_ops/fuzz/ together with the codec core (no TensorFlow), for the
tests that run the core's kernels on inputs Python cannot hand them (masks, refused streams)."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CXX = shutil.which("g++") or shutil.which("clang++")
# What UseAvx2Kernels checks (abm: LZCNT); /proc/cpuinfo spells them so.
AVX2_FLAGS = frozenset({"avx2", "bmi1", "bmi2", "popcnt", "abm"})
# What UseAvx512Lister checks besides.
AVX512_LISTER_FLAGS = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512_vbmi2"})


def cpu_flags():
    """This machine's CPU flags (/proc/cpuinfo): which kernels the core picks here."""
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        return frozenset(f.read().split())


def build(tmp_path_factory, name):
    """custom_ops/fuzz/<name>.cc compiled with every core source; returns the executable's path
    (skips the test where there is no C++ compiler)."""
    if not CXX:
        pytest.skip("no C++ compiler (g++ or clang++)")
    core = os.path.join(ROOT, "custom_ops", "core")
    exe = str(tmp_path_factory.mktemp(name) / "driver")
    sources = [os.path.join(ROOT, "custom_ops", "fuzz", name + ".cc")] + sorted(
        os.path.join(core, f) for f in os.listdir(core) if f.endswith(".cc"))
    proc = subprocess.run([CXX, "-O2", "-std=c++17", "-pthread", "-I", core, *sources, "-o", exe],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return exe
