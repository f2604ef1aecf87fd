"""SyncReplicasOptimizer with compressed gradient pushes and model pulls.

Same constructor, methods and meaning as
tf.compat.v1.train.SyncReplicasOptimizer, plus a `compressor`. Per step
(the 3LC paper's Figure 1), for each parameter server (one *channel* each):

  worker: grads -> compress (error buffers on the worker's host CPU)
          -> a few push messages (buckets, last layers first; payloads,
             small gradients, sparse rows, the worker's local step and
             model version) --> PS, each as soon as its gradients are in
  PS:     unpack -> decompress -> accumulators (stale pushes dropped)
          -> the bucket's round gate on the round board
  chief:  per bucket, once its round is in (the gate; a chief's new session
          fences off the takes of an earlier session's update): take
          `replicas_to_aggregate` grads -> inner optimizer updates its
          masters -> per variable,
          compress (master - shadow) ONCE, shadow += delta; the bucket's
          parts in ONE row, logged by step; the round board says so
          -> after every bucket: global_step += 1 -> tokens
  worker: per bucket, its row's reply as soon as the board has its round
          (while later buckets are still pushed); the last reply after the
          token (token, version, what the earlier replies lacked)
          --> local copy += delta (same op as the shadow: bit-identical).

A worker too far behind (or after a restart) copies the shadow once at full
precision. Tensors under `compress_threshold` elements are sent uncompressed.

The pieces (each gets the shared state, state.Shared, explicitly):
  state.py         config, global/local step, PS and worker state
  layout.py        which variables, on which PS (entry.py: one variable)
  records.py       what each build phase returns to the next (no object
                   is finished later by another phase)
  channel.py       one PS: its push message and what the PS does with it
  wire.py          how a message travels (docs/FORMAT.md's step message)
  push.py          one variable's push: encode on the worker, decode on the PS
  sparse.py        row-sparse pushes and pulls
  aggregation.py   the chief's update, tokens
  pull_log.py      the rows a PS logs after each update
  replay.py        the replies to a worker and its replay
  worker_step.py   a worker's step across channels
  full_sync.py     full-precision copy and the bitwise consistency check
  startup.py       init ops and tokens for sessions (TF's recipes use them)
  hook.py          the session hook
  recovery.py      the model back on a restarted PS
  sync_replicas.py the optimizer's API
"""
from tlc.optimizer.sync_replicas import (  # noqa: F401
    DEFAULT_COMPRESS_THRESHOLD,
    DEFAULT_PULL_LOG_SIZE,
    SyncReplicasOptimizer,
)
