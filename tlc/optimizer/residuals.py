"""Error-feedback state in checkpoints (issue 22 point 5).

Two residuals carry what compression has not sent yet:
  - push: each worker's error memory (the compressor's variables, on the
    worker's host, e.g. `<var>/tlc_push_memory`);
  - pull: on each PS, `master - shadow` (the shadow is what every worker
    holds); saving the shadow saves it.

The chief's saver reaches only the parameter servers and its own device, so
every worker's push memory has a copy on the PS of its variable,
`<memory>/worker_<i>`, one per worker task i < total_num_replicas. The working
memory stays on the worker (no extra bytes per step); a copy is brought up to
date only when the chief saves: it asks each other worker through a queue on
the global step's PS, a thread of each worker (blocked on that queue, idle
otherwise) writes its memory into its copies and says so, and the chief waits
for every answer (a worker that ended has written its copies at its end; one
that does not answer within RESIDUAL_WAIT_SECS keeps its previous copy, and the
chief says so in one line). A worker's working memory is loaded from its PS
copy whenever its session is created: a resumed run, a restarted worker or a
re-created session continues from the copy (the last checkpoint's, or the
copy the restarted PS was restored with); a copy of zeros is not sent (the
memory keeps its own value).

Shadows and copies are tlc state saved by `Saver` (state.CHECKPOINTED), the
default saver tlc puts in the graph's SAVERS collection (MonitoredSession,
MonitoredTrainingSession, tlc.session.training_session); they are not global
variables, so stock TF savers and checkpoints are unchanged. `Saver` restores
a checkpoint without them (stock TF's, an older tlc's): the model from the
checkpoint, tlc's state from its initial values (residuals at zero, shadows =
masters), and the chief says so in one line.
"""
import time

import numpy as np
import tensorflow as tf
from tensorflow.python.training.saving import saveable_object_util  # pylint: disable=no-name-in-module

from tlc.optimizer import state

RESIDUAL_WAIT_SECS = 60.0
POLL_SECS = 0.02
ENDED = np.iinfo(np.int64).max  # a worker's answer at its end: its copies are final


def memory_variables(memory):
    """The tf.Variables of a compressor's memory (a variable, or dicts and
    lists of them); other objects (tuning knobs) are not residuals."""
    if isinstance(memory, tf.Variable):
        return [memory]
    if isinstance(memory, dict):
        return [v for key in sorted(memory) for v in memory_variables(memory[key])]
    if isinstance(memory, (list, tuple)):
        return [v for m in memory for v in memory_variables(m)]
    return []


def _value_or_zeros(variable):
    """Its value, or zeros if not initialised yet (a recipe without the hook
    makes the memory with this load)."""
    return tf.cond(tf.compat.v1.is_variable_initialized(variable), variable.read_value,
                   lambda: tf.zeros(variable.shape, variable.dtype.base_dtype))


class Residuals:
    """The PS copies of every worker's push memory and the ops around them."""

    def __init__(self, shared, entries, memories):
        """memories: [(entry, push memory variable)] the push built."""
        gs, config = shared.global_step, shared.config
        self.num_workers = config.total_num_replicas
        self.index = state.worker_index(shared.worker_host)
        self.memories = list(memories)
        self.shadows = [e.shadow for e in entries if e.shadow is not None]
        self.restored = None  # set by Saver.restore in the chief: (path, loaded, missing)
        # Chief: the global step at which every copy was last current (the
        # copies were loaded or collected); a save at that step asks no one.
        self.current_at = None
        with tf.device(gs.device):
            self.global_step = tf.cast(gs.read_value(), tf.int64)
        self.answer_op = self.upload_fed = self.request = self.load_op = None
        if not self.memories:
            self.copies, self.server_variables = [], []
            return
        # copies[i][j]: worker i's copy of memory j.
        with tf.name_scope(""):
            self.copies = [[self._copy(e, m, i) for e, m in self.memories]
                           for i in range(self.num_workers)]
        with tf.device(gs.device), tf.name_scope(""):
            self.request_count = state.server_variable([], tf.int64, "tlc_residual_requests")
            # Per worker: the request it answered last (ENDED at its end).
            self.answered = state.server_variable([self.num_workers], tf.int64,
                                                  "tlc_residual_answered")
            self.queues = [tf.queue.FIFOQueue(-1, tf.int64, shapes=(),
                                              name=f"tlc_residual_request_{i}",
                                              shared_name=f"tlc_residual_request_{i}")
                           for i in range(self.num_workers)]
        self.server_variables = [v for row in self.copies for v in row] + [
            self.request_count, self.answered]
        if self.index >= self.num_workers:
            return  # a task beyond total_num_replicas: no copy of its own
        with tf.device(gs.device):
            asked = self.request_count.assign_add(1)
            with tf.control_dependencies([q.enqueue(asked) for i, q in enumerate(self.queues)
                                          if i != self.index]):
                self.request = tf.identity(asked)
            request = self.queues[self.index].dequeue()
        self.fed_id = tf.compat.v1.placeholder(tf.int64, [], name="tlc_residual_id")
        self.upload_fed = self._upload(self.fed_id)
        self.answer_op = self._upload(request)
        self.load_op = self._load()

    def _copy(self, entry, memory, worker):
        with tf.device(entry.master.device):
            variable = tf.compat.v1.Variable(
                lambda: tf.zeros(memory.shape, memory.dtype.base_dtype), trainable=False,
                name=f"{memory.op.name}/worker_{worker}", use_resource=True,
                collections=[state.SERVER_STATE, state.CHECKPOINTED])
        return variable

    def _upload(self, request_id):
        """This worker's memory into its PS copies, then its answer."""
        written = []
        for (_, memory), copy in zip(self.memories, self.copies[self.index]):
            with tf.device(copy.device):
                written.append(copy.assign(memory.read_value(), read_value=False))
        with tf.control_dependencies(written), tf.device(self.answered.device):
            return tf.compat.v1.scatter_update(self.answered, [self.index], [request_id]).op

    def _load(self):
        """This worker's PS copies into its memory where a copy holds a
        residual (restored or written); its answer reset (a worker back after
        its end). A copy of zeros (never written, or made again on a
        restarted PS) is not sent: the memory keeps what it holds (zeros in a
        new process, the live residual in a re-created session), and a fresh
        start moves no model-sized copy per worker."""
        loads = []
        for (_, memory), copy in zip(self.memories, self.copies[self.index]):
            with tf.device(copy.device):
                held = tf.cond(tf.compat.v1.is_variable_initialized(copy),
                               lambda c=copy: tf.reduce_any(tf.not_equal(c.read_value(), 0)),
                               lambda: tf.constant(False))
            with tf.device(memory.device):
                value = tf.cond(held, copy.read_value, lambda m=memory: _value_or_zeros(m))
                loads.append(memory.assign(value, read_value=False))
        with tf.device(self.answered.device):
            reset = tf.cond(tf.compat.v1.is_variable_initialized(self.answered),
                            lambda: tf.compat.v1.scatter_update(self.answered, [self.index],
                                                                [0]).op,
                            tf.no_op)
        return tf.group(*loads, reset)

    def collect(self, session, timeout=RESIDUAL_WAIT_SECS):
        """Chief, before a save: every worker's memory into its PS copies."""
        if self.request is None:
            return
        step = int(session.run(self.global_step))
        if self.current_at is not None and step <= self.current_at:
            return  # no step since the copies were loaded or collected
        self.current_at = step
        asked = int(session.run(self.request))
        session.run(self.upload_fed, {self.fed_id: asked})
        deadline = time.time() + timeout
        while True:
            answered = session.run(self.answered)
            late = [i for i in range(self.num_workers) if answered[i] < asked]
            if not late:
                return
            if time.time() > deadline:
                print(f"tlc: checkpoint: worker{'s' * (len(late) > 1)} "
                      f"{', '.join(map(str, late))} did not send {'their' if len(late) > 1 else 'its'} "
                      f"push residual within {timeout:.0f} s; the checkpoint keeps the previous one",
                      flush=True)
                return
            time.sleep(POLL_SECS)

    def upload_at_end(self, session):
        """A worker at its end: its copies final, the chief waits no more."""
        if self.upload_fed is not None:
            session.run(self.upload_fed, {self.fed_id: ENDED})

    def describe_restore(self):
        """The chief's line about tlc's state after a restore, or None."""
        if self.restored is None:
            return None
        path, loaded, missing, other_shapes = self.restored
        if not missing:
            return None
        what = [n for n, vs in (("shadows", self.shadows),
                                ("push residuals", [v for row in self.copies for v in row]))
                if any(v in missing for v in vs)]
        return (f"tlc: checkpoint {path} holds no {' and no '.join(what)} for "
                f"{len(missing)} of {len(missing) + len(loaded)} tlc variables"
                + (f" ({other_shapes} saved with other shapes: variables sliced for another "
                   "number of parameter servers)" if other_shapes else "")
                + ": they start fresh (residuals at zero, shadows = masters)")


def checkpointed_state(graph=None):
    return (graph or tf.compat.v1.get_default_graph()).get_collection(state.CHECKPOINTED)


class Saver(tf.compat.v1.train.Saver):
    """TF's Saver over the global variables plus tlc's error-feedback state
    (shadows, every worker's push residual): saves after collecting the
    workers' residuals; restores a checkpoint with or without tlc's state."""

    def __init__(self, residuals):
        super().__init__(sharded=True, allow_empty=True, defer_build=True)
        self._residuals = residuals
        self._model_saver = None
        self._tlc_state = {}

    def build(self):
        if self._model_saver is None:
            model = (tf.compat.v1.global_variables()
                     + tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS))
            tlc_state = checkpointed_state()
            self._var_list = model + tlc_state  # pylint: disable=attribute-defined-outside-init
            self._tlc_state = saveable_object_util.op_list_to_dict(
                tlc_state, convert_variable_to_tensor=False)
            # Restores the model alone; tlc's state is loaded key by key.
            self._model_saver = tf.compat.v1.train.Saver(model, sharded=True, allow_empty=True)
        super().build()

    def save(self, sess, save_path, global_step=None, *args, **kwargs):  # pylint: disable=keyword-arg-before-vararg
        for residuals in self._residuals:
            residuals.collect(sess)
        return super().save(sess, save_path, global_step, *args, **kwargs)

    def restore(self, sess, save_path):
        if self._model_saver is None:
            return super().restore(sess, save_path)
        self._model_saver.restore(sess, save_path)
        saved = tf.train.load_checkpoint(save_path).get_variable_to_shape_map()
        # A variable sliced for another number of servers has other slice
        # shapes: its model restores (TF re-slices it), its tlc state starts fresh.
        loaded = {k: v for k, v in self._tlc_state.items()
                  if k in saved and list(saved[k]) == v.shape.as_list()}
        missing = [v for k, v in self._tlc_state.items() if k not in loaded]
        reader = tf.train.load_checkpoint(save_path)
        if loaded:
            sess.run([v.initializer for v in loaded.values()],
                     {v.initializer.inputs[1]: reader.get_tensor(k) for k, v in loaded.items()})
        for residuals in self._residuals:
            residuals.restored = (save_path, list(loaded.values()), missing,
                                  sum(k in saved for k in self._tlc_state) - len(loaded))
        return None


def install_saver(residuals):
    """Makes tlc's Saver the graph's default saver (before the Scaffold
    picks one), unless a saver is there already or there is no tlc state."""
    graph = tf.compat.v1.get_default_graph()
    if not checkpointed_state(graph) or graph.finalized:
        return None
    savers = graph.get_collection_ref(tf.compat.v1.GraphKeys.SAVERS)
    if savers:
        if isinstance(savers[0], Saver) and residuals not in savers[0]._residuals:  # pylint: disable=protected-access
            savers[0]._residuals.append(residuals)  # pylint: disable=protected-access
        return savers[0]
    saver = Saver([residuals])
    savers.append(saver)
    return saver
