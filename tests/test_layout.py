"""The package's layers import only downward: codec <- compressors <- optimizer <- job;
measurement programs are modules of benchmarks/.

Read from the source (ast), so a layer violation fails here even when the
import would happen to work at run time.
"""
import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tlc"

# Layer of each module path prefix (longest match wins); higher may import lower.
LAYERS = {
    "tlc.ops": 0, "tlc.codec": 0, "tlc._codec": 0, "tlc._tlc_ops": 0, "tlc.moments": 0,
    "tlc.message": 0, "tlc.grpc_options": 0,
    "tlc.compressors": 1,
    "tlc.controller": 2, "tlc.replica": 2, "tlc.session": 2, "tlc.placement": 2,
    "tlc.watchdog": 2, "tlc.statistic_updates": 2,
    "tlc.optimizer": 3, "tlc.traffic": 3,
    "tlc.job": 4, "tlc.train": 5,
}


def layer(module):
    best = None
    for prefix, level in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, level)
    return best


def module_name(path):
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def tlc_imports(path):
    """Every tlc module the file imports, at any depth of the file."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("tlc"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tlc"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


SOURCES = sorted(p for p in ROOT.rglob("*.py") if module_name(p) != "tlc")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: module_name(p))
def test_imports_point_down(path):
    own = layer(module_name(path))
    assert own is not None, f"{module_name(path)} has no layer in tests/test_layout.py"
    for imported in tlc_imports(path):
        theirs = layer(imported)
        if theirs is None or theirs[0] == own[0]:
            continue  # a name, not a module (from tlc import x), or the same layer
        assert theirs[1] <= own[1], (
            f"{module_name(path)} (layer {own[1]}) imports {imported} (layer {theirs[1]})")


def test_library_needs_nothing_of_the_job():
    """`import tlc` and everything under it but tlc/job works without the job."""
    for path in SOURCES:
        name = module_name(path)
        if name.startswith(("tlc.job", "tlc.train")):
            continue
        assert not any(i.startswith("tlc.job") for i in tlc_imports(path)), name


CHECKOUT = ROOT.parent
MOVED_PROGRAMS = ["recovery_benchmark", "adaptive_demo", "link_model_demo"]


def test_measurement_programs_are_benchmarks_modules():
    """Measurement programs live in benchmarks/ and run as modules from the
    checkout (`python3 -m benchmarks.<name>`), importing as everything else
    does; scripts/ holds shell tools only (no program that edits sys.path
    to import by path)."""
    assert not sorted(p.name for p in (CHECKOUT / "scripts").glob("*.py"))
    for name in MOVED_PROGRAMS:
        run = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--help"],
                             cwd=CHECKOUT, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": str(CHECKOUT)})
        assert run.returncode == 0 and run.stdout.startswith("usage:"), (name, run.stderr[-2000:])
        assert "sys.path" not in (CHECKOUT / "benchmarks" / f"{name}.py").read_text(), name


def test_tf_op_sources_follow_one_naming_rule():
    """custom_ops/tf/: per op family, <family>_ops.cc registers the ops and
    <family>_kernels.cc holds the kernels of exactly those ops; setup.py
    builds every one of them."""
    tf_dir = CHECKOUT / "custom_ops" / "tf"
    sources = sorted(p.name for p in tf_dir.glob("*.cc"))
    families = sorted({name.rsplit("_", 1)[0] for name in sources})
    assert sources == sorted(f"{f}_{part}.cc" for f in families for part in ("ops", "kernels"))
    for family in families:
        ops = (tf_dir / f"{family}_ops.cc").read_text()
        kernels = (tf_dir / f"{family}_kernels.cc").read_text()
        assert "REGISTER_KERNEL_BUILDER" not in ops and "REGISTER_OP(" not in kernels, family
        registered = set(re.findall(r'REGISTER_OP\("(\w+)"\)', ops))
        assert registered and registered == set(re.findall(r'"(Tlc\w+)"', kernels)), family
    setup = subprocess.run(
        [sys.executable, "-c", "from distutils.core import run_setup; print([s for e in run_setup("
         "'setup.py', stop_after='init').ext_modules for s in e.sources if '/tf/' in s])"],
        cwd=CHECKOUT, capture_output=True, text=True, timeout=300)
    assert setup.stdout.strip() == str([f"custom_ops/tf/{name}" for name in sources]), setup.stderr
