"""tlc's gRPC options (tlc/grpc_options.py) reach TensorFlow in every process
that imports tlc and in every task the launcher starts, and an option the user
set stays theirs. Their effect, training going on within seconds of a cut
link's return, is measured in tests/test_partitions.py."""
import os
import subprocess
import sys

import pytest

from tlc import grpc_options
from tlc.job import cluster as cl

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def options(value):
    return dict(item.split("=", 1) for item in value.split(","))


def test_every_option_when_unset():
    assert options(grpc_options.merged(None)) == {k: str(v) for k, v in
                                                  grpc_options.OPTIONS.items()}


def test_the_users_setting_wins():
    mine = "grpc.keepalive_time_ms=30000,grpc.http2.max_pings_without_data=0"
    got = options(grpc_options.merged(mine))
    assert got["grpc.keepalive_time_ms"] == "30000"
    assert got["grpc.http2.max_pings_without_data"] == "0"
    assert got["grpc.keepalive_timeout_ms"] == str(grpc_options.OPTIONS["grpc.keepalive_timeout_ms"])
    assert grpc_options.merged(mine).count("grpc.keepalive_time_ms") == 1


def _env_after_import(value):
    env = {k: v for k, v in os.environ.items() if k != grpc_options.ENV}
    if value is not None:
        env[grpc_options.ENV] = value
    env["PYTHONPATH"] = ROOT
    code = "import os, tlc; print(os.environ.get('TF_GRPC_DEFAULT_OPTIONS'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    return out.strip().splitlines()[-1]


def test_import_tlc_sets_them():
    # A user's own job gets them before it makes a server or a session.
    assert options(_env_after_import(None)) == options(grpc_options.merged(None))
    assert options(_env_after_import("grpc.keepalive_timeout_ms=9000"))[
        "grpc.keepalive_timeout_ms"] == "9000"


def test_launched_tasks_get_them(monkeypatch):
    monkeypatch.delenv(grpc_options.ENV, raising=False)
    env = cl._task_env()  # pylint: disable=protected-access
    assert options(env[grpc_options.ENV]) == options(grpc_options.merged(None))
