"""Feeds the network-aware controllers (tlc.controller) from a running worker.

The controllers are pure arithmetic; this module measures what they need on
the live cluster and feeds their choice back into the graph every step:

- compute time per step: a local forward/backward pass (the model reads the
  worker's local copy, so this touches no network), re-measured now and then;
- when each tensor's gradient becomes ready: from one traced local pass, the
  end time of the op that produces each gradient, relative to the first
  gradient op's start (AQGB's ready times);
- link throughput: bytes this worker pushed and pulled in a step over the
  part of the step that was not compute (a lower bound of the link's rate,
  which makes the controllers err towards more compression).

aqgb_auto gets one level per tensor from LevelController; 3lc_auto one s per
step from SparsityController and a time budget (--push_budget).
"""
import time

import tensorflow as tf

from tlc import controller
from tlc.compressors.aqgb import ControlledLevels
from tlc.compressors.threelc import ControlledThreeLC

REMEASURE_EVERY = 200     # steps between compute-time measurements
MIN_COMM_SECONDS = 1e-3   # floor of the communication part of a step


def wants_tuning(compressor):
    return isinstance(compressor, (ControlledThreeLC, ControlledLevels))


class AutoTuner:
    """Per-step knob values for a controlled compressor.

    compressor: the worker's push compressor (3lc_auto or aqgb_auto);
    sync: the tlc.SyncReplicasOptimizer, after apply_gradients(grads_and_vars);
    grads_and_vars: what was given to it (local copies as the variables);
    push_budget: seconds a push may take (3lc_auto; aqgb_auto: time the last
    layer's push may take after backprop ends, default an average gap).
    """

    def __init__(self, compressor, sync, grads_and_vars, push_budget=None):
        if not wants_tuning(compressor):
            raise ValueError(f"autotune: {compressor.describe()} has no knobs to tune")
        self.compressor = compressor
        self.sync = sync
        self.push_budget = push_budget
        self.grads = [g for g, _ in grads_and_vars if g is not None]
        self.layers = self._compressed(grads_and_vars)
        self.compute_seconds = None
        self.throughput = None
        self.setting = None
        self._steps = 0
        if isinstance(compressor, ControlledThreeLC):
            if not push_budget or push_budget <= 0:
                raise ValueError("3lc_auto needs --push_budget > 0 (seconds a push may take)")
            elements = sum(n for _, n in self.layers)
            self.control = controller.SparsityController(elements, push_budget)
            self.setting = compressor.sparsity_multiplier
        else:
            if len(self.layers) != len(compressor.knobs):
                raise ValueError(f"autotune: {len(compressor.knobs)} level knobs for "
                                 f"{len(self.layers)} compressed tensors")
            self.control = None  # made once the ready times are measured
            self.setting = [compressor.initial_level] * len(self.layers)

    def _compressed(self, grads_and_vars):
        """(gradient, elements) of the compressed tensors, in the optimizer's
        order (which is also the order it made the compressors' knobs in)."""
        sizes = {id(local): master.shape.num_elements()
                 for local, master, _ in self.sync.compressed_variables}
        return [(g, sizes[id(v)]) for g, v in grads_and_vars
                if g is not None and id(v) in sizes]

    # ------------------------------------------------------------ measuring --
    def measure(self, session, feed):
        """Times a local forward/backward pass; traces it once for ready times."""
        session.run(self.grads, feed)  # warm
        start = time.perf_counter()
        session.run(self.grads, feed)
        self.compute_seconds = time.perf_counter() - start
        if self.control is None:
            ready = self._ready_times(session, feed)
            tail = self.push_budget or (max(ready) / max(1, len(ready)))
            self.control = controller.LevelController([n for _, n in self.layers], ready,
                                                      tail_seconds=max(tail, 1e-4))

    def _ready_times(self, session, feed):
        options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        meta = tf.compat.v1.RunMetadata()
        session.run([g for g, _ in self.layers], feed, options=options, run_metadata=meta)
        ends, starts = {}, []
        for dev in meta.step_stats.dev_stats:
            for node in dev.node_stats:
                name = node.node_name.split(":")[0]
                end = node.all_start_micros + node.all_end_rel_micros
                ends[name] = max(end, ends.get(name, 0))
                if "gradients" in name:
                    starts.append(node.all_start_micros)
        origin = min(starts) if starts else min(ends.values(), default=0)
        times = []
        for g, _ in self.layers:
            end = ends.get(g.op.name)
            if end is None:  # fused or renamed: fall back to the latest op seen
                end = max(ends.values(), default=origin)
            times.append(max(0.0, (end - origin) / 1e6))
        return times

    # ------------------------------------------------------------- stepping --
    def feed_dict(self):
        """Knob values for the next step."""
        if isinstance(self.compressor, ControlledThreeLC):
            return self.compressor.knob.feed_dict(self.setting)
        feed = {}
        for knob, level in zip(self.compressor.knobs.values(), self.setting):
            feed.update(knob.feed_dict(level))
        return feed

    def after_step(self, session, feed, step_seconds, pushed, pulled):
        """Updates the setting from one step's time and bytes (this worker)."""
        self._steps += 1
        if self.compute_seconds is None or self._steps % REMEASURE_EVERY == 0:
            self.measure(session, feed)
        comm = max(MIN_COMM_SECONDS, step_seconds - self.compute_seconds)
        sample = max(1.0, float(pushed + pulled)) / comm
        if isinstance(self.control, controller.SparsityController):
            self.setting = self.control.update(sample, self.setting, max(1, int(pushed)))
        else:
            self.setting = self.control.update(sample)
        self.throughput = self.control.throughput.value
        return self.setting

    def describe(self):
        """Short text for progress lines."""
        rate = f"{8 * self.throughput / 1e6:.1f} Mbit/s" if self.throughput else "?"
        if isinstance(self.compressor, ControlledThreeLC):
            return f"s {self.setting:.2f} at {rate}"
        levels = self.setting
        mean = sum(lv * n for lv, (_, n) in zip(levels, self.layers)) / max(
            1, sum(n for _, n in self.layers))
        return f"levels {min(levels)}-{max(levels)} (mean {mean:.1f} bits) at {rate}"

    def record(self):
        """JSON-able state for the run summary's curve."""
        out = {"link_bytes_per_s": self.throughput, "compute_seconds": self.compute_seconds}
        if isinstance(self.compressor, ControlledThreeLC):
            out["s"] = self.setting
        else:
            out["levels"] = list(self.setting)
        return out
