"""A MonitoredSession for PS training that starts fast and stops fast.

tf.compat.v1.train.MonitoredTrainingSession makes non-chief workers poll for
the chief's initialisation every 30 s and waits up to 120 s for threads at
the end; here both are short. Checkpoints are saved and restored by the chief
as usual.
"""
import tensorflow as tf
from tensorflow.python.training import session_manager  # pylint: disable=no-name-in-module

POLL_SECS = 0.5


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
