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
from absl import flags as absl_flags

from tlc.job import flagcheck, lines
from tlc.job.flags import FLAGS


def check_flags():
    """Refuses bad flags before any process starts: one line, exit 2. Every
    flag is checked before TensorFlow is imported, the cluster too; only
    building the compressors (to check --compressor_args) imports it, and a
    task imports it anyway. Returns the task to run: (cluster, job, index),
    (cluster, None, None) to launch every task of --cluster here, or None
    to launch a local cluster."""
    problems = flagcheck.errors(FLAGS)
    if problems:
        flagcheck.refuse(problems)
    from tlc.job import cluster as cl  # pylint: disable=import-outside-toplevel
    try:
        if FLAGS.cluster:
            spec = cl.parse_cluster(FLAGS.cluster)
            if FLAGS.job_name is not None:
                cl.check_task(spec, FLAGS.job_name, FLAGS.task_index)
            where = (spec, FLAGS.job_name, FLAGS.task_index if FLAGS.job_name else None)
        elif os.environ.get("TF_CONFIG"):
            where = cl.from_tf_config(os.environ["TF_CONFIG"])
        else:
            where = None
    except cl.ClusterError as e:  # one line, no traceback, naming the flag
        where = " (--cluster, --job_name, --task_index)" if FLAGS.cluster else ""
        raise SystemExit(f"tlc: {e}{where}") from None
    if (where and where[1]) or FLAGS.compressor_args:
        from tlc.job import quiet  # pylint: disable=import-outside-toplevel
        quiet.import_tensorflow()
        problems = flagcheck.compressor_errors(FLAGS)
        if problems:
            flagcheck.refuse(problems)
    return where


def main(argv):
    del argv
    lines.install()  # the watchdog and the launcher's threads print beside the main thread
    where = check_flags()
    if where is not None and where[1] is not None:
        return run_task(*where)
    from tlc.job import launcher  # pylint: disable=import-outside-toplevel
    return launcher.launch(FLAGS, spec=where[0] if where else None)


def run_task(spec, job, index):
    from tlc.job import task  # pylint: disable=import-outside-toplevel
    code = task.run(spec, job, index, FLAGS)
    sys.stdout.flush()
    sys.stderr.flush()
    # TF's gRPC server and queue-runner threads can keep a process alive for
    # minutes after training; the work is done and flushed, so leave now.
    os._exit(code)  # pylint: disable=protected-access


def _parse_flags(argv):
    """absl's parsing, but a bad value is flagcheck's one line, not absl's two."""
    try:
        return FLAGS(argv)
    except absl_flags.Error as e:
        flagcheck.refuse([flagcheck.parse_error(e)])
        raise  # not reached: refuse exits


def entry():
    app.run(main, flags_parser=_parse_flags)


if __name__ == "__main__":
    entry()
