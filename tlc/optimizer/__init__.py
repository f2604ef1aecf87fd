"""SyncReplicasOptimizer with compressed gradient pushes and model pulls.

Same constructor, methods and meaning as
tf.compat.v1.train.SyncReplicasOptimizer, plus a `compressor`. Per step
(the 3LC paper's Figure 1):

  worker: grad -> compress (error buffer on the worker's host CPU) --payload-->
  PS:     decompress -> ConditionalAccumulator (stale pushes dropped)
  chief:  take `replicas_to_aggregate` grads -> inner optimizer updates master
          -> per variable, compress (master - shadow) ONCE, shadow += delta,
             keep the payload in a small log keyed by step -> global_step += 1
          -> tokens
  worker: token -> fetch the logged payloads it has not applied yet --payload-->
          local copy += delta (same op as the shadow, so bit-identical).

A worker too far behind (or after a restart) copies the shadow once at full
precision. Tensors under `compress_threshold` elements are sent uncompressed.

The pieces, one module each: push.py (worker compress -> PS accumulator),
aggregation.py (chief update, tokens), pull_log.py (compress the model delta
once, log it), replay.py (worker applies logged deltas), full_sync.py
(full-precision copy and consistency check), hook.py (session start-up and
resync), recovery.py (the model back on a restarted PS), sync_replicas.py
(the optimizer that puts them together).
"""
from tlc.optimizer.sync_replicas import (  # noqa: F401
    DEFAULT_COMPRESS_THRESHOLD,
    DEFAULT_PULL_LOG_SIZE,
    SyncReplicasOptimizer,
)
