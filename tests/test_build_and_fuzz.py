"""CI steps inside the suite: the offline Bazel build of the op library, the
sanitizer fuzz run of every core decoder (and proof that it catches a planted
bug), and the atheris run over both Python front ends."""
import os
import re
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DECODERS = ("decompress", "decompress_adaptive", "accumulate", "accumulate_adaptive",
            "unpack_base3", "zre_decode", "golomb_decode", "decompress_block", "accumulate_block",
            "unpack_message")
HAVE_CXX = shutil.which("g++") or shutil.which("clang++")


def run(cmd, timeout, env=None):
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    return proc, proc.stdout + "\n--- stderr ---\n" + proc.stderr[-4000:]


@pytest.mark.skipif(shutil.which("bazel") is None,
                    reason="bazel not installed (Debian package bazel-bootstrap)")
def test_bazel_builds_identical_op_library():
    proc, log = run(["bash", "scripts/ci_bazel.sh"], timeout=1200)
    assert proc.returncode == 0, log
    digests = re.findall(r"^(?:bazel|setup\.py) build: +([0-9a-f]{64})$", proc.stdout, re.M)
    assert len(digests) == 2 and digests[0] == digests[1], log
    assert "bazel op library OK: identical bytes" in proc.stdout


@pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler (g++ or clang++)")
def test_decoders_survive_sanitized_fuzzing(tmp_path):
    proc, log = run(["bash", "scripts/ci_fuzz.sh", "--seconds", "10"], timeout=900,
                    env={"TLC_FUZZ_OUT": str(tmp_path)})
    assert proc.returncode == 0, log
    for decoder in DECODERS:
        m = re.search(rf"^{decoder}: (\d+) inputs, 0 crashes \((\d+) decoded, \d+ calls",
                      proc.stdout, re.M)
        assert m, f"no summary line for {decoder}\n{log}"
        # Enough inputs to mean something even on a loaded machine, and some
        # must decode: the seeds from the encoders reach the success paths.
        assert int(m.group(1)) >= 300 and int(m.group(2)) > 0, m.group(0)
    assert "AddressSanitizer" not in proc.stderr and "runtime error" not in proc.stderr


@pytest.mark.skipif(not HAVE_CXX, reason="no C++ compiler (g++ or clang++)")
def test_fuzzing_catches_a_planted_bug(tmp_path):
    # A core whose 3LC decoder skips the check that padding digits are zero.
    core = tmp_path / "core"
    shutil.copytree(os.path.join(ROOT, "custom_ops", "core"), core)
    src = (core / "threelc.cc").read_text()
    check = "!PaddingIsZero(code[len - 1], n)"
    assert check in src, "threelc.cc changed: update the planted bug"
    (core / "threelc.cc").write_text(src.replace(check, "false"))
    proc, log = run(["bash", "scripts/ci_fuzz.sh", "--seconds", "6", "--only", "decompress",
                     "--core", str(core)], timeout=600, env={"TLC_FUZZ_OUT": str(tmp_path / "out")})
    assert proc.returncode != 0, log
    assert re.search(r"^decompress: \d+ inputs, 1 crashes", proc.stdout, re.M), log
    assert "FUZZ FAILURE in decompress: accepted an invalid code" in proc.stderr, log


def test_front_ends_survive_atheris(tmp_path):
    pytest.importorskip("atheris")
    proc, log = run([sys.executable, "tests/fuzz_ops_atheris.py", "-atheris_runs=3000",
                     "-seed=1", f"-artifact_prefix={tmp_path}/"], timeout=600,
                    env={"PYTHONPATH": ROOT})
    assert proc.returncode == 0, log
    m = re.search(r"^atheris: 3000 inputs, (\d+) decoded, 0 crashes$", proc.stdout, re.M)
    assert m and int(m.group(1)) > 0, log
