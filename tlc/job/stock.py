"""The baseline a user has today: TensorFlow's own
tf.compat.v1.train.SyncReplicasOptimizer with TF's variable placement
(replica_device_setter: every variable lives on a PS and every step reads it
from there), float32 both ways. The main job runs it with --sync=tf.

StockSync wraps it with the few read-outs the training loop takes from
tlc.SyncReplicasOptimizer. Its byte counters are the float32 sizes TF moves
(every gradient pushed dense, every variable read each step); the benchmarks
measure the wire with the kernel's counters, not with these.
"""
import tensorflow as tf
from tensorflow.python.training import queue_runner  # pylint: disable=no-name-in-module

from tlc import statistic_updates

v1 = tf.compat.v1


class StockSync:
    """TF's SyncReplicasOptimizer plus the training loop's counters."""

    def __init__(self, opt, replicas_to_aggregate, total_num_replicas, worker_device):
        self._worker_device = worker_device
        self._sync = v1.train.SyncReplicasOptimizer(opt, replicas_to_aggregate,
                                                    total_num_replicas)
        self.full_syncs = self.full_sync_bytes = 0
        self.compressed_variables = []

    class _Described:
        @staticmethod
        def describe():
            return "TF SyncReplicasOptimizer (float32)"

    compressor = pull_compressor = _Described()

    def compute_gradients(self, loss):
        return self._sync.compute_gradients(loss)

    def apply_gradients(self, grads_and_vars, global_step):
        grads_and_vars = [(g, v) for g, v in grads_and_vars if g is not None]
        train_op = self._sync.apply_gradients(grads_and_vars, global_step=global_step)
        # TF's runner counts only OutOfRangeError as a closed queue, so closing the
        # session at the end printed a CancelledError traceback; same ops, no noise.
        runner = self._sync.get_chief_queue_runner()
        self._sync._chief_queue_runner = queue_runner.QueueRunner(  # pylint: disable=protected-access
            runner.queue, runner.enqueue_ops,
            queue_closed_exception_types=(tf.errors.OutOfRangeError, tf.errors.CancelledError))
        # Each step sends every gradient and reads every variable, and reads
        # each batch statistic it updates and writes it back.
        size = 4 * sum(v.shape.num_elements() for _, v in grads_and_vars) \
            + updated_statistics_bytes(global_step.graph)
        with tf.device(self._worker_device):
            # On the worker, like tlc's counters (not on a PS, where TF's placement puts variables).
            counters = {name: v1.Variable(0, dtype=tf.int64, trainable=False, name=f"stock_{name}",
                                          collections=[v1.GraphKeys.LOCAL_VARIABLES])
                        for name in ("bytes_pushed", "bytes_pulled", "worker_steps")}
        with tf.control_dependencies([train_op]):
            counted = [counters["bytes_pushed"].assign_add(size),
                       counters["bytes_pulled"].assign_add(size),
                       counters["worker_steps"].assign_add(1)]
            with tf.control_dependencies(counted):
                self.version_after_step = tf.identity(global_step.read_value())
        self.local_version = global_step.read_value()
        self.traffic = {**counters, "float32_bytes_per_step": tf.constant(size, tf.int64)}
        self.step_traffic = {"pushed": tf.constant(size, tf.int64),
                             "pulled": tf.constant(size, tf.int64)}
        self.pull_compressions = tf.constant(0, tf.int64)  # TF compresses nothing
        return tf.group(train_op, *counted)

    def make_session_run_hook(self, is_chief, num_tokens=-1, checkpoint_dir=None,
                              save_checkpoint_steps=None, stall_timeout=None, last_step=None):
        # TF's optimizer keeps no push memory (nothing to shard), its hook
        # has no watchdog (the job's own watches) and releases no tokens at
        # the end: tlc's hook arguments go unused.
        del checkpoint_dir, save_checkpoint_steps, stall_timeout, last_step
        return self._sync.make_session_run_hook(is_chief, num_tokens)

    @staticmethod
    def time_breakdown(session):
        del session  # TF's optimizer has no phase timestamps
        return None

    @staticmethod
    def local_copy_check(session):
        del session  # no local copies: every step reads the PS's variables
        return None


def updated_statistics_bytes(graph):
    """Bytes of the batch statistics (float variables kept ON_READ, as
    tf_keras and the job's models make them) that ops other than their
    initializers write: under TF's optimizer each such write reads the
    statistic from its PS and sends the update back."""
    total = 0
    for variable in graph.get_collection(v1.GraphKeys.GLOBAL_VARIABLES):
        if (getattr(variable, "synchronization", None) != tf.VariableSynchronization.ON_READ
                or not variable.dtype.is_floating):
            continue
        if statistic_updates.writes_of(variable):
            total += variable.dtype.base_dtype.size * variable.shape.num_elements()
    return total
