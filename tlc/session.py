"""Sessions for PS training.

`training_session`: tf.compat.v1.train.MonitoredTrainingSession makes
non-chief workers poll for the chief's initialisation every 30 s; here the
poll is short. Checkpoints are saved and restored by the chief as usual.

`serve_until_workers_done` / `worker_done`: an end for parameter servers.
TF's `server.join()` never returns, so a PS would outlive training; with
these a PS serves until every worker has said it is done, then returns.

`exit_task`: ends a task's process at once. TF's gRPC server cannot be
stopped, and a process that has one takes TF 5-25 s to tear down after its
last line (measured on a 2-core machine).
"""
import os
import sys
import time

import tensorflow as tf
from tensorflow.python.training import session_manager  # pylint: disable=no-name-in-module

POLL_SECS = 0.5
PS_EXIT_GRACE = 0.2  # seconds: lets the last worker's "done" get its reply


def _fast_manager(creator):
    scaffold = creator._scaffold  # pylint: disable=protected-access
    return session_manager.SessionManager(
        local_init_op=scaffold.local_init_op,
        local_init_feed_dict=scaffold.local_init_feed_dict,
        ready_op=scaffold.ready_op,
        ready_for_local_init_op=scaffold.ready_for_local_init_op,
        graph=tf.compat.v1.get_default_graph(),
        recovery_wait_secs=POLL_SECS)


class _ChiefCreator(tf.compat.v1.train.ChiefSessionCreator):
    def _get_session_manager(self):
        if not self._session_manager:
            self._session_manager = _fast_manager(self)
        return self._session_manager


class _WorkerCreator(tf.compat.v1.train.WorkerSessionCreator):
    def _get_session_manager(self):
        if not self._session_manager:
            self._session_manager = _fast_manager(self)
        return self._session_manager


def training_session(master, is_chief, hooks=(), checkpoint_dir=None, save_checkpoint_steps=None,
                     config=None, stop_grace_period_secs=1, max_wait_secs=600):
    """MonitoredSession; the chief restores from / saves to checkpoint_dir."""
    scaffold = tf.compat.v1.train.Scaffold()
    hooks = list(hooks)
    if is_chief:
        creator = _ChiefCreator(scaffold=scaffold, master=master, config=config,
                                checkpoint_dir=checkpoint_dir)
        if checkpoint_dir and save_checkpoint_steps:
            hooks.append(tf.compat.v1.train.CheckpointSaverHook(
                checkpoint_dir, save_steps=save_checkpoint_steps, scaffold=scaffold))
    else:
        creator = _WorkerCreator(scaffold=scaffold, master=master, config=config,
                                 max_wait_secs=max_wait_secs)
    return tf.compat.v1.train.MonitoredSession(
        session_creator=creator, hooks=hooks, stop_grace_period_secs=stop_grace_period_secs)


def _done_queue(ps_index):
    with tf.device(f"/job:ps/task:{ps_index}"):
        return tf.queue.FIFOQueue(-1, tf.int32, shapes=(), shared_name=f"tlc_done_ps{ps_index}",
                                  name=f"tlc_done_ps{ps_index}")


def _task(server):
    """(cluster, job name, task index) of a tf.distribute.Server."""
    server_def = server.server_def
    return tf.train.ClusterSpec(server_def.cluster), server_def.job_name, server_def.task_index


def serve_until_workers_done(server):
    """For a parameter server instead of `server.join()`: serves until every
    worker of the cluster has called `worker_done`, then returns."""
    cluster, job, index = _task(server)
    num_workers = cluster.num_tasks("worker")
    own = tf.compat.v1.ConfigProto(device_filters=[f"/job:{job}/task:{index}"])
    with tf.Graph().as_default():
        done = _done_queue(index).dequeue_many(num_workers)
        with tf.compat.v1.Session(server.target, config=own) as sess:
            sess.run(done)
    time.sleep(PS_EXIT_GRACE)


def worker_done(server):
    """For a worker, after its training session has closed: tells every
    parameter server that this worker needs it no more."""
    cluster, job, index = _task(server)
    config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:{job}/task:{index}"])
    with tf.Graph().as_default():
        say_done = [_done_queue(i).enqueue(index) for i in range(cluster.num_tasks("ps"))]
        with tf.compat.v1.Session(server.target, config=config) as sess:
            try:
                sess.run(say_done)
            except tf.errors.UnavailableError:
                pass  # the last "done" lets a PS leave, possibly before it replies


def exit_task(code=0):
    """Flushes stdout and stderr and ends the process now with `code`,
    skipping TF's slow teardown of its gRPC server. Call it last."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # pylint: disable=protected-access
