"""The Bazel build and the sanitizer fuzz run, as CI steps inside the suite."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DECODERS = ("decompress", "decompress_adaptive", "accumulate", "accumulate_adaptive",
            "unpack_base3", "zre_decode", "golomb_decode")


@pytest.mark.skipif(shutil.which("bazel") is None, reason="bazel not installed "
                    "(Debian package bazel-bootstrap)")
def test_bazel_builds_identical_op_library():
    proc = subprocess.run(["bash", "scripts/ci_bazel.sh"], cwd=ROOT, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "identical bytes" in proc.stdout


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_decoders_survive_sanitized_fuzzing():
    proc = subprocess.run(["bash", "scripts/ci_fuzz.sh", "--seconds", "5"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for decoder in DECODERS:
        line = next(l for l in proc.stdout.splitlines() if l.startswith(decoder + ":"))
        assert line.endswith("0 crashes") and int(line.split()[1]) > 1000, line
    assert "runtime error" not in proc.stderr and "AddressSanitizer" not in proc.stderr
