"""README's install command, `pip install <checkout>`, into a fresh venv (one
venv, reused for every check):

- it brings TensorFlow (the pin of requirements.txt) and builds the ops in
  that install: the checkout's stale library and build record (poisoned
  copies planted in tlc/ and build/) are not what gets installed;
- `import tlc, tlc.ops` then works from another directory, and the TF op
  and the numpy codec give the same bytes;
- a TensorFlow other than the one the ops were built for, or none, is one
  ImportError line naming both and the command that fixes it;
- with a TensorFlow already installed (a GPU build is a `tensorflow`
  distribution: the installed tensorflow-cpu relabelled as one) pip pulls in
  no second TensorFlow, and one of another minor version stops the install
  with one line.

The TensorFlow wheel comes from pip's index (a local mirror or its cache
here). 10-35 minutes: pip installs TensorFlow twice (the isolated build's and
the venv's) and the ops compile once, so it runs with TLC_SLOW=1 only (CI's
budget is 40 minutes for everything)."""
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IGNORE = shutil.ignore_patterns(".git", ".venv", "build", "runs", "dist", "*.so", "__pycache__",
                                "*.egg-info", ".pytest_cache", "_build_info.py")
POISON = b"not a library: a stale _tlc_ops.so left in the checkout\n"
CHECK = """
import hashlib, os, sys
import numpy as np
import tensorflow as tf
import tlc, tlc.ops, tlc.codec
from tlc import _build_info
here = os.path.dirname(os.path.abspath(tlc.__file__))
assert here.startswith(sys.prefix), (here, sys.prefix)
x = np.linspace(-1, 1, 5000).astype(np.float32)
code, m = tlc.codec.compress_3lc(x, np.zeros_like(x), 1.0)
tf_code, tf_m, _ = tlc.ops.compress_3lc(x, np.zeros_like(x), 1.0)
assert bytes(code) == bytes(tf_code.numpy()), "numpy module and TF op disagree"
with open(tlc.ops._LIBRARY, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
print("tlc from", here, "ops", digest, "built for", _build_info.TF_DISTRIBUTION,
      _build_info.TF_VERSION, "running", tf.version.VERSION)
"""


def run(argv, cwd, ok=True):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if ok:
        assert result.returncode == 0, f"{argv}: exit {result.returncode}\n" \
                                       f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def import_error(python, cwd, module="tlc.ops"):
    """The ImportError line that `import <module>` ends with (it must fail)."""
    result = run([python, "-c", f"import {module}"], cwd, ok=False)
    assert result.returncode != 0, result.stdout
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: "), result.stderr[-3000:]
    assert "undefined symbol" not in result.stderr and "ModuleNotFoundError" not in result.stderr
    return last[len("ImportError: "):]


def tensorflow_dist_info(site):
    (path,) = glob.glob(os.path.join(site, "tensorflow*-*.dist-info"))
    return path


def relabel(dist_info, name, version):
    """Renames an installed distribution (its METADATA and folder): pip and
    importlib.metadata then see `name` `version` installed."""
    metadata = os.path.join(dist_info, "METADATA")
    with open(metadata, encoding="utf-8") as f:
        lines = f.read().split("\n")
    lines = [f"Name: {name}" if line.startswith("Name: ") else
             f"Version: {version}" if line.startswith("Version: ") else line for line in lines]
    with open(metadata, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    renamed = os.path.join(os.path.dirname(dist_info),
                           f"{name.replace('-', '_')}-{version}.dist-info")
    os.rename(dist_info, renamed)
    return renamed


@pytest.mark.skipif(os.environ.get("TLC_SLOW") != "1",
                    reason="slow (10-35 min: TensorFlow installed twice, the ops compiled): "
                           "TLC_SLOW=1 runs it")
def test_pip_install_of_the_checkout_into_a_fresh_venv(tmp_path):
    source = tmp_path / "tlc-src"
    shutil.copytree(ROOT, source, ignore=IGNORE)
    # What an earlier in-place build and an earlier `pip install` leave behind.
    platform_lib = f"lib.{sysconfig.get_platform()}-{sys.implementation.cache_tag}"
    for stale in (source / "tlc", source / "build" / platform_lib / "tlc"):
        stale.mkdir(parents=True, exist_ok=True)
        (stale / "_tlc_ops.so").write_bytes(POISON)
        (stale / "_build_info.py").write_text("TF_DISTRIBUTION = 'stale'\nTF_VERSION = '0.0'\n"
                                              "SOURCE = ''\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")

    install = run([python, "-m", "pip", "install", str(source)], cwd=elsewhere)
    assert "tensorflow" in install.stdout.split("Successfully installed")[-1], install.stdout[-2000:]
    out = run([python, "-c", CHECK], cwd=elsewhere).stdout
    print(out)
    assert f"tlc from {venv}" in out, out
    assert hashlib.sha256(POISON).hexdigest() not in out
    assert "built for tensorflow-cpu 2.21.0 running 2.21.0" in out, out
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
               cwd=elsewhere).stdout.strip()
    info = os.path.join(site, "tlc", "_build_info.py")
    with open(info, encoding="utf-8") as f:
        recorded = f.read()

    def record(version):
        with open(info, "w", encoding="utf-8") as f:
            f.write(recorded.replace("'2.21.0'", repr(version)))

    # Ops built for another TensorFlow than the one found (faked in the record).
    record("2.20.0")
    line = import_error(python, elsewhere)
    assert line == ("tlc's ops were built for tensorflow-cpu 2.20.0, but TensorFlow 2.21.0 is "
                    f"installed in {venv}: pip install tensorflow-cpu==2.20.0"), line
    record("2.21.7")  # the same minor version: rebuilding against this one fixes it
    line = import_error(python, elsewhere)
    assert line == ("tlc's ops were built for tensorflow-cpu 2.21.7, but TensorFlow 2.21.0 is "
                    f"installed in {venv}: pip install --force-reinstall --no-deps {source}"), line
    record("2.21.0")

    # A TensorFlow already there (as a GPU build is: a distribution named
    # tensorflow): the install requires no other; another minor version stops it.
    dist_info = relabel(tensorflow_dist_info(site), "tensorflow", "2.21.0")
    report = tmp_path / "report.json"
    dry = run([python, "-m", "pip", "install", "--dry-run", "--report", str(report),
               str(source)], cwd=elsewhere)
    with open(report, encoding="utf-8") as f:
        planned = {item["metadata"]["name"]: item["metadata"].get("requires_dist", [])
                   for item in json.load(f)["install"]}
    assert "tlc" in planned and not [n for n in planned if n.startswith("tensorflow")], planned
    assert not [r for r in planned["tlc"] if r.startswith("tensorflow")], planned
    assert "tensorflow" not in dry.stdout.split("Would install")[-1], dry.stdout[-2000:]
    dist_info = relabel(dist_info, "tensorflow", "2.19.0")
    refused = run([python, "-m", "pip", "install", "--dry-run", str(source)], cwd=elsewhere,
                  ok=False)
    assert refused.returncode != 0
    assert ("tlc: this environment has tensorflow 2.19.0; tlc's ops are built for TensorFlow "
            "2.21.x: upgrade it (pip install tensorflow==2.21.0)") in refused.stdout + refused.stderr
    dist_info = relabel(dist_info, "tensorflow", "2.21.0")

    # No TensorFlow at all.
    run([python, "-m", "pip", "uninstall", "-y", "tensorflow"], cwd=elsewhere)
    line = import_error(python, elsewhere, module="tlc")
    assert line == ("tlc's ops were built for tensorflow-cpu 2.21.0, and no TensorFlow is "
                    f"installed in {venv}: pip install tensorflow-cpu==2.21.0"), line
