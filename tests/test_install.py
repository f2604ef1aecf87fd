"""`pip install` of tlc from a copy of the checkout into a fresh venv builds
the ops, and `import tlc, tlc.ops` then works from any directory; the same for
a built wheel installed into a second fresh venv.

The venvs are created without pip and see this interpreter's packages through
a .pth file (like --system-site-packages, but also when this interpreter is
itself a venv, as on CI): TensorFlow (~250 MB, not in any pip cache here) is
then neither downloaded nor installed again, and the build runs with
--no-build-isolation against that same TensorFlow. What the test checks is
tlc's own packaging: sources found, ops built, files installed where the
package loads them, nothing read from the checkout."""
import glob
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IGNORE = shutil.ignore_patterns(".git", ".venv", "build", "runs", "dist", "*.so", "__pycache__",
                                "*.egg-info", ".pytest_cache")
CHECK = """
import os, sys
import numpy as np
import tensorflow as tf
import tlc, tlc.ops, tlc.codec
here = os.path.dirname(os.path.abspath(tlc.__file__))
assert here.startswith(sys.prefix), (here, sys.prefix)
x = np.linspace(-1, 1, 5000).astype(np.float32)
code, m = tlc.codec.compress_3lc(x, np.zeros_like(x), 1.0)
tf_code, tf_m, _ = tlc.ops.compress_3lc(x, np.zeros_like(x), 1.0)
assert bytes(code) == bytes(tf_code.numpy()), "numpy module and TF op disagree"
print("tlc from", here, "compressed", x.nbytes, "->", len(code), "bytes")
"""


def fresh_venv(path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = str(path / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    parent = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    with open(os.path.join(site, "_parent_packages.pth"), "w", encoding="utf-8") as f:
        f.write("\n".join(sorted(parent)) + "\n")
    return python


def run(argv, cwd):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{argv}: exit {result.returncode}\n{result.stdout[-3000:]}\n" \
                                   f"{result.stderr[-3000:]}"
    return result.stdout


@pytest.mark.slow
def test_pip_install_and_wheel_from_a_fresh_venv(tmp_path):
    source = tmp_path / "tlc-src"
    shutil.copytree(ROOT, source, ignore=IGNORE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    python = fresh_venv(tmp_path / "venv")
    run([python, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", str(source)],
        cwd=elsewhere)
    out = run([python, "-c", CHECK], cwd=elsewhere)
    assert f"tlc from {tmp_path / 'venv'}" in out, out
    print(out)

    # The wheel (reuses the built objects of the copy), into a second venv.
    run([python, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
         "-w", str(tmp_path / "dist"), str(source)], cwd=elsewhere)
    (wheel,) = glob.glob(str(tmp_path / "dist" / "tlc-*.whl"))
    python2 = fresh_venv(tmp_path / "venv2")
    run([python2, "-m", "pip", "install", "-q", "--no-deps", wheel], cwd=elsewhere)
    out = run([python2, "-c", CHECK], cwd="/")
    assert f"tlc from {tmp_path / 'venv2'}" in out, out
    print(out)
