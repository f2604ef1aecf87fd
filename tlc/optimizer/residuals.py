"""Error-feedback state in checkpoints (issue 22 point 5, issue 30 point 1).

Two residuals carry what compression has not sent yet:
  - pull: on each PS, `master - shadow` (the shadow is what every worker
    holds); the chief's checkpoint saves the shadow, so it saves that.
  - push: each worker's error memory (the compressor's variables, on the
    worker's host, e.g. `<var>/tlc_push_memory`). It is saved where it lives:
    each worker's task writes its own shard file,
    `tlc_push_memory-worker<i>-<step>.npz`, named by its worker index and the
    global step of the checkpoint it goes with, atomically (a whole file or
    none), in the directory its hook is given (the checkpoint directory when
    the tasks share it, else the worker's own run directory). Nothing of it is
    on the PS or crosses the training link, so neither grows with the number
    of workers.

When a worker writes its shard (no message from the chief):
  - the chief: inside its save (`Saver.save`), at the saved step, exactly;
  - another worker, after each step: when the checkpoint state file of a
    shared directory names a step it has no shard for (one `stat` per step,
    read only when it changes; the memory is then that of the step the
    worker is at, at most a step or two after the save); with no state file
    in its directory, when the global step it already gets back from its
    step reaches the chief's next save by steps (the chief's CheckpointHook
    saves at its session's first step and every `save_checkpoint_steps`
    after: the worker counts the same way from its session's first step).
    The state file wins where there is one: the step the chief names is the
    global step it reads while its own update may be under way, one less
    than the step rule's at times, and a shard of a step with no checkpoint
    is of no use to a resume (measured in the main job: checkpoint 20, the
    other worker's shards 21, then 40 and 42);
  - at its end, at the last global step it trained on (the chief's last
    checkpoint is at that step: the end of training is the last update).
The state file is what a local cluster has (one run directory); a worker on
another machine has only the step rule and its end, which is why both exist.

A worker's session restores its memory from its shard for the global step it
finds when its session starts (the chief restored that step, or the PS kept
it); with no such shard its memory starts at zero and it says so in one line.
A session re-created in the same process (a PS restarted, a connection lost)
without a shard for its step keeps the memory the worker had (what it has not
sent yet), and says so: with the hook the memories are not local variables,
which a MonitoredSession re-initialises with each new session.
A fresh start (step 0) has nothing to restore. TF's recipes without the hook
(Supervisor, a plain Session) start every memory at zero and write no shard.

Shadows are tlc state saved by `Saver` (state.CHECKPOINTED), the default saver
tlc puts in the graph's SAVERS collection (MonitoredSession,
MonitoredTrainingSession, tlc.session.training_session); they are not global
variables, so stock TF savers and checkpoints are unchanged. `Saver` restores
a checkpoint without them (stock TF's, an older tlc's): the model from the
checkpoint, tlc's state from its initial values (shadows = masters), and the
chief says so in one line; the workers' shards are then missing too.
"""
import glob
import os
import re

import numpy as np
import tensorflow as tf
from tensorflow.python.checkpoint import checkpoint_management  # pylint: disable=no-name-in-module
from tensorflow.python.training.saving import saveable_object_util  # pylint: disable=no-name-in-module

from tlc.optimizer import state

SHARD_PREFIX = "tlc_push_memory"
KEEP_SHARDS = 5  # without a state file to say which checkpoints remain: as TF's Saver keeps


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


def shard_path(directory, worker, step):
    return os.path.join(directory, f"{SHARD_PREFIX}-worker{worker}-{int(step)}.npz")


def _shard_steps(directory, worker):
    pattern = re.compile(rf"{SHARD_PREFIX}-worker{worker}-(\d+)\.npz$")
    return sorted(int(m.group(1)) for m in map(pattern.search, glob.glob(
        os.path.join(glob.escape(directory), f"{SHARD_PREFIX}-worker{worker}-*.npz"))) if m)


def checkpoint_steps(directory):
    """The global steps of the checkpoints a state file lists (None: no state file)."""
    saved = checkpoint_management.get_checkpoint_state(directory)
    if saved is None:
        return None
    return {int(p.rsplit("-", 1)[1]) for p in saved.all_model_checkpoint_paths
            if p.rsplit("-", 1)[-1].isdigit()}


class Residuals:
    """This task's push memory (its shards) and the shadows the chief saves."""

    def __init__(self, shared, entries, memories):
        """memories: [(entry, push memory variable)] the push built."""
        gs = shared.global_step
        self.index = state.worker_index(shared.worker_host)
        self.memories = [m for _, m in memories]
        self.shadows = [e.shadow for e in entries if e.shadow is not None]
        self.restored = None  # set by Saver.restore in the chief: (path, loaded, missing, other)
        self.saved_step = None  # the step of this task's newest shard
        with tf.device(gs.device):
            self.global_step = tf.cast(gs.read_value(), tf.int64)
        self._loads, nonzero = [], []
        for memory in self.memories:
            with tf.device(memory.device):
                fed = tf.compat.v1.placeholder(memory.dtype.base_dtype, memory.shape,
                                               name=f"{memory.op.name}/tlc_restore")
                self._loads.append((fed, memory.assign(fed, read_value=False)))
                nonzero.append(tf.reduce_any(tf.not_equal(memory, 0)))
        if self.memories:
            self._unmade = state.uninitialized_names(self.memories)
            self._make = tf.compat.v1.variables_initializer(self.memories)
            self._holds_values = tf.reduce_any(tf.stack(nonzero))

    def keep_across_sessions(self):
        """Session hook's begin: the memories out of the graph's local
        variables, which each new session of a MonitoredSession initialises
        again; the session's local init op (TF's default, made here) makes
        them only where they are not yet. With a local init op of the
        user's own, nothing changes."""
        keys = tf.compat.v1.GraphKeys
        if not self.memories or tf.compat.v1.get_collection(keys.LOCAL_INIT_OP):
            return
        local = tf.compat.v1.get_collection_ref(keys.LOCAL_VARIABLES)
        mine = {m.ref() for m in self.memories}
        local[:] = [v for v in local if v.ref() not in mine]
        tf.compat.v1.add_to_collection(keys.LOCAL_INIT_OP, tf.group(
            tf.compat.v1.train.Scaffold.default_local_init_op(),
            *[state.ensure_initialized(m) for m in self.memories],
            name="tlc_local_init_keeping_push_memories"))

    def save_shard(self, session, directory, step):
        """This task's memory into its shard for `step`, written whole or not
        at all (a temporary file renamed); a shard of that step kept (the
        memory it holds is the one that goes with the checkpoint)."""
        if not self.memories or directory is None or step <= 0:
            return  # at step 0 the memory is zero: nothing to restore
        path = shard_path(directory, self.index, step)
        if self.saved_step == step or os.path.exists(path):
            self.saved_step = step
            return
        values = session.run(self.memories)
        os.makedirs(directory, exist_ok=True)
        temporary = f"{path}.tmp{os.getpid()}"
        try:
            with open(temporary, "wb") as f:
                np.savez(f, **{m.op.name: v for m, v in zip(self.memories, values)})
            os.replace(temporary, path)
        except OSError:
            if os.path.exists(temporary):  # a full disk: no partial file left behind
                os.remove(temporary)
            raise
        self.saved_step = step
        self._prune(directory, step)

    def warm_up(self, session):
        """Reads the memories once: a session's first read of them builds its
        executor (~0.1 s measured on a busy machine), at the session's start
        instead of in its first save's stall."""
        if self.memories:
            session.run(self.memories)

    def _prune(self, directory, newest):
        """Deletes this task's shards of checkpoints the chief has deleted
        (or, with no state file, all but the newest KEEP_SHARDS)."""
        steps = _shard_steps(directory, self.index)
        kept = checkpoint_steps(directory)
        if kept is None:
            gone = steps[:-KEEP_SHARDS]
        else:
            oldest = min(kept | {newest})
            gone = [s for s in steps if s < oldest]
        for step in gone:
            try:
                os.remove(shard_path(directory, self.index, step))
            except FileNotFoundError:
                pass

    def restore_shard(self, session, directory, step, keep=False):
        """This task's memory from its shard for `step`; None, or the one line
        saying the shard is not used and what the memory holds instead:
        zeros, or with `keep` (a session re-created in this process) the
        values it already held, if it holds any."""
        self.saved_step = None
        if not self.memories:
            return None
        if not keep or len(session.run(self._unmade)):
            session.run(self._make)
        if step <= 0:
            return None
        why = self._load(session, directory, step)
        if why is None:
            self.saved_step = step
            return None
        who = f"tlc: worker {self.index}: push memory"
        if keep and session.run(self._holds_values):
            return f"{who} kept from this worker's last step at step {step}: {why}"
        return f"{who} starts at zero at step {step}: {why}"

    def _load(self, session, directory, step):
        """The memory from the shard for `step`; None, or why not (nothing
        is assigned then)."""
        if directory is None:
            return "no directory for its shards"
        path = shard_path(directory, self.index, step)
        try:
            with np.load(path) as shard:
                feed = {}
                for (fed, _), memory in zip(self._loads, self.memories):
                    value = shard[memory.op.name]
                    if value.shape != tuple(memory.shape.as_list()):
                        return (f"{path} holds {memory.op.name} with shape {value.shape}, not "
                                f"{tuple(memory.shape.as_list())}")
                    feed[fed] = value
        except FileNotFoundError:
            return f"no shard {path}"
        except KeyError as e:
            return f"{path} holds no {e.args[0]}"
        except (OSError, ValueError) as e:
            return f"{path} is unreadable ({e})"
        session.run([load for _, load in self._loads], feed)
        return None

    def describe_restore(self):
        """The chief's line about tlc's state after a restore, or None."""
        if self.restored is None:
            return None
        path, loaded, missing, other_shapes = self.restored
        if not missing:
            return None
        return (f"tlc: checkpoint {path} holds no shadows for "
                f"{len(missing)} of {len(missing) + len(loaded)} tlc variables"
                + (f" ({other_shapes} saved with other shapes: variables sliced for another "
                   "number of parameter servers)" if other_shapes else "")
                + ": they start fresh (shadows = masters)")


def checkpointed_state(graph=None):
    return (graph or tf.compat.v1.get_default_graph()).get_collection(state.CHECKPOINTED)


class Saver(tf.compat.v1.train.Saver):
    """TF's Saver over the global variables plus tlc's shadows: a save also
    writes this task's push-memory shard beside the checkpoint; restores a
    checkpoint with or without tlc's state."""

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
        path = super().save(sess, save_path, global_step, *args, **kwargs)
        if global_step is not None:
            step = global_step if isinstance(global_step, int) else int(
                tf.compat.v1.train.global_step(sess, global_step))
            # Before the state file names the checkpoint (CheckpointHook): a
            # resume from it finds the chief's shard.
            for residuals in self._residuals:
                residuals.save_shard(sess, os.path.dirname(save_path), step)
        return path

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
    if not (checkpointed_state(graph) or residuals.memories) or graph.finalized:
        return None
    savers = graph.get_collection_ref(tf.compat.v1.GraphKeys.SAVERS)
    if savers:
        if isinstance(savers[0], Saver) and residuals not in savers[0]._residuals:  # pylint: disable=protected-access
            savers[0]._residuals.append(residuals)  # pylint: disable=protected-access
        return savers[0]
    saver = Saver([residuals])
    savers.append(saver)
    return saver
