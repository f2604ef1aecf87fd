"""Markers by test file, so that a subset can be chosen with -m:

  unit     no processes of its own and no cluster: codec, ops, formats, flags
  cluster  starts TF servers or job processes (in-process or multi-process)
  root     needs network namespaces and tc (its tests skip unless root)
  slow     minutes each: builds, fuzzing, pip install, benchmark runs

`bash scripts/test.sh -m unit` runs the fast subset."""
import os

import pytest

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CLUSTER = {
    "test_autotune", "test_bad_flags", "test_bench_training", "test_channels",
    "test_chief_restart_tokens", "test_cluster", "test_data", "test_drop_in",
    "test_example_job", "test_fault_messages", "test_faults", "test_first_run",
    "test_hostile_push", "test_partitions", "test_placement", "test_pull_compressions",
    "test_recovery", "test_scaling", "test_sparse", "test_stock_baseline",
    "test_sync_replicas_parity", "test_tf_config", "test_tf_sync_replicas_port",
    "test_traffic_hook", "test_watchdog", "test_residual_checkpoint", "test_bench_sparse",
    "test_serve_until_done", "test_session_recipes", "test_readme_quickstart",
}
ROOT = {
    "test_autotune", "test_bench_mxnet", "test_bench_training", "test_cluster", "test_netem",
    "test_partitions", "test_placement", "test_scaling",
}
SLOW = {
    "test_build_and_fuzz", "test_install", "test_partitions", "test_scaling",
    "test_bench_mxnet", "test_bench_training",
}


def pytest_collection_modifyitems(items):
    for item in items:
        name = os.path.splitext(os.path.basename(str(item.fspath)))[0]
        kinds = [kind for kind, files in (("cluster", CLUSTER), ("root", ROOT), ("slow", SLOW))
                 if name in files]
        for kind in kinds or ["unit"]:
            item.add_marker(getattr(pytest.mark, kind))


@pytest.fixture(scope="session")
def no_tensorflow(tmp_path_factory):
    """An environment in which `import tensorflow` fails loudly."""
    shim = tmp_path_factory.mktemp("shim")
    (shim / "tensorflow").mkdir()
    (shim / "tensorflow" / "__init__.py").write_text(
        "raise ImportError('TENSORFLOW WAS IMPORTED')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), ROOT_DIR, env.get("PYTHONPATH")) if p)
    return env
