"""The main job: train a model on a PS/worker cluster with tlc compression.

  python -m tlc.train                      # embedded default: 1 PS + 2 workers
  python -m tlc.train --flagfile=configs/3lc_s1.75.cfg
  python -m tlc.train --cluster=cluster.json --job_name=worker --task_index=0
  python -m tlc.train --cluster=cluster.json   # every task of it, on this machine

With no cluster (no --cluster, no TF_CONFIG) this process launches the
cluster itself on this machine and prints the chief's progress and a short
summary (the full one goes to summary.json). With a cluster it runs the one
task it is told to.
"""
import os
import sys

# Before TensorFlow is imported anywhere: keep its C++ start-up chatter out.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app

from tlc.job import flagcheck
from tlc.job.flags import FLAGS


def check_flags(build_compressors):
    """Refuses bad configurations before any process starts: one line, exit 2.
    Building the compressors (to check --compressor_args) imports TensorFlow."""
    problems = flagcheck.errors(FLAGS)
    if not problems and build_compressors:
        problems = flagcheck.compressor_errors(FLAGS)
    if problems:
        flagcheck.refuse(problems)


def main(argv):
    del argv
    # A task imports TensorFlow anyway; the launcher only to check compressor arguments.
    imports_tf = bool(FLAGS.job_name or os.environ.get("TF_CONFIG") or FLAGS.compressor_args)
    if imports_tf:
        from tlc.job import quiet  # pylint: disable=import-outside-toplevel
        quiet.import_tensorflow()
    check_flags(build_compressors=imports_tf)
    if FLAGS.cluster:
        from tlc.job import cluster as cl  # pylint: disable=import-outside-toplevel
        try:
            spec = cl.parse_cluster(FLAGS.cluster)
            if FLAGS.job_name is not None:
                cl.check_task(spec, FLAGS.job_name, FLAGS.task_index)
        except cl.ClusterError as e:
            raise SystemExit(f"tlc: {e}") from None  # one line, no traceback
        if FLAGS.job_name is None:  # every task of the description, on this machine
            from tlc.job import launcher  # pylint: disable=import-outside-toplevel
            return launcher.launch(FLAGS, spec=spec)
        return run_task(spec, FLAGS.job_name, FLAGS.task_index)
    if os.environ.get("TF_CONFIG"):
        from tlc.job import cluster as cl  # pylint: disable=import-outside-toplevel
        spec, job, index = cl.from_tf_config(os.environ["TF_CONFIG"])
        return run_task(spec, job, index)
    from tlc.job import launcher  # pylint: disable=import-outside-toplevel
    return launcher.launch(FLAGS)


def run_task(spec, job, index):
    from tlc.job import task  # pylint: disable=import-outside-toplevel
    code = task.run(spec, job, index, FLAGS)
    sys.stdout.flush()
    sys.stderr.flush()
    # TF's gRPC server and queue-runner threads can keep a process alive for
    # minutes after training; the work is done and flushed, so leave now.
    os._exit(code)  # pylint: disable=protected-access


def entry():
    app.run(main)


if __name__ == "__main__":
    entry()
