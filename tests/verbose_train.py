"""`python -m tlc.train` with TensorFlow's INFO lines kept (session
re-creations, gRPC errors): for diagnosing fault runs from the task logs.
tests/partition_cluster.py uses it when TLC_VERBOSE_TASKS=1."""
import os
import runpy
import sys

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tlc.job.task as task  # noqa: E402  pylint: disable=wrong-import-position

_quiet = task._quiet_tensorflow  # pylint: disable=protected-access


def _louder():
    _quiet()
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    tf.get_logger().setLevel("INFO")


task._quiet_tensorflow = _louder  # pylint: disable=protected-access
sys.argv = ["tlc.train"] + sys.argv[1:]
runpy.run_module("tlc.train", run_name="__main__", alter_sys=True)
