"""Feeds the network-aware controllers (tlc.controller) from a running worker.

The controllers are pure arithmetic; this module measures what they need on
the live cluster and feeds their choice back into the graph every step:

- compute time per step: the fastest of a few local forward/backward passes
  (the model reads the worker's local copy, so this touches no network),
  re-measured now and then. The fastest, because a busy machine only ever
  slows a pass down: an inflated compute time would hide communication and
  make the link look faster than it is;
- when each tensor's gradient becomes ready: from a few traced local passes,
  the end time of the op that produces each gradient, relative to the first
  gradient op's start, the earliest over the passes (AQGB's ready times);
- the link: each step's bytes (pushed and pulled by this worker) and the
  part of the step that was not compute, fitted as `latency + bytes / rate`
  over the last LINK_WINDOW(_3LC) steps from step EARLY_REMEASURE on
  (tlc.controller.LinkModel). When the bytes hardly vary (AQGB's are fixed
  by the levels) the fit falls back to bytes/seconds over the window, a
  lower bound of the link's rate, which makes the controllers err towards
  more compression.

aqgb_auto gets one level per tensor from LevelController (at the fitted
rate); 3lc_auto one s per step from SparsityController and a time budget
(--push_budget).
"""
import time

import tensorflow as tf

from tlc import controller
from tlc.compressors.aqgb import ControlledLevels
from tlc.compressors.threelc import ControlledThreeLC

REMEASURE_EVERY = 50      # steps between compute-time measurements
EARLY_REMEASURE = 10      # and once when start-up (the other tasks') is over
TIMED_PASSES = 3          # compute time: the fastest of these
TRACED_PASSES = 3         # ready times: the earliest of these
MIN_COMM_SECONDS = 1e-3   # floor of the communication part of a step
LINK_WINDOW = 20          # steps of the link fit (aqgb_auto: bytes fixed, so mostly the ratio)
LINK_WINDOW_3LC = 40      # 3lc_auto fits two parameters to noisy steps: a longer window


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
        # The estimator before the link fit (bytes/seconds per step, averaged
        # 1:1 with the previous value), kept for comparison in the run's curve.
        self.ratio_estimate = None
        if isinstance(compressor, ControlledThreeLC):
            if not push_budget or push_budget <= 0:
                raise ValueError("3lc_auto needs --push_budget > 0 (seconds a push may take)")
            elements = sum(n for _, n in self.layers)
            self.control = controller.SparsityController(
                elements, push_budget, fixed_bytes=self._uncompressed_bytes(grads_and_vars),
                window=LINK_WINDOW_3LC)
            self.link = self.control.link
            self.setting = compressor.sparsity_multiplier
        else:
            if len(self.layers) != len(compressor.knobs):
                raise ValueError(f"autotune: {len(compressor.knobs)} level knobs for "
                                 f"{len(self.layers)} compressed tensors")
            self.control = None  # made once the ready times are measured
            self.link = controller.LinkModel(LINK_WINDOW)
            self.setting = [compressor.initial_level] * len(self.layers)

    def _compressed(self, grads_and_vars):
        """(gradient, elements) of the compressed tensors, in the optimizer's
        order (which is also the order it made the compressors' knobs in)."""
        sizes = {id(local): master.shape.num_elements()
                 for local, master, _ in self.sync.compressed_variables}
        return [(g, sizes[id(v)]) for g, v in grads_and_vars
                if g is not None and id(v) in sizes]

    def _uncompressed_bytes(self, grads_and_vars):
        """Bytes a push sends as float values whatever s is (small tensors)."""
        compressed = {id(local) for local, _, _ in self.sync.compressed_variables}
        return sum(v.dtype.base_dtype.size * v.shape.num_elements() for g, v in grads_and_vars
                   if g is not None and id(v) not in compressed
                   and not isinstance(g, tf.IndexedSlices))

    # ------------------------------------------------------------ measuring --
    def measure(self, session, feed):
        """Times local forward/backward passes; traces a few for ready times."""
        if self.compute_seconds is None:
            session.run(self.grads, feed)  # warm
        seconds = []
        for _ in range(TIMED_PASSES):
            start = time.perf_counter()
            session.run(self.grads, feed)
            seconds.append(time.perf_counter() - start)
        self.compute_seconds = min(seconds)
        if self.control is None:
            traces = [self._ready_times(session, feed) for _ in range(TRACED_PASSES)]
            ready = [min(times) for times in zip(*traces)]
            tail = self.push_budget or (max(ready) / max(1, len(ready)))
            # smoothing=1: the link window already averages over steps.
            self.control = controller.LevelController([n for _, n in self.layers], ready,
                                                      tail_seconds=max(tail, 1e-4),
                                                      smoothing=1.0)

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
        if (self.compute_seconds is None or self._steps == EARLY_REMEASURE
                or self._steps % REMEASURE_EVERY == 0):
            self.measure(session, feed)
        if self._steps == EARLY_REMEASURE:
            self.link.clear()  # start-up steps are slow for reasons other than the link
        comm = max(MIN_COMM_SECONDS, step_seconds - self.compute_seconds)
        link_bytes = max(1.0, float(pushed + pulled))
        self.ratio_estimate = link_bytes / comm if self.ratio_estimate is None else (
            0.5 * link_bytes / comm + 0.5 * self.ratio_estimate)
        if isinstance(self.control, controller.SparsityController):
            self.setting = self.control.update(link_bytes, comm, self.setting,
                                               max(1, int(pushed)))
        else:
            _, rate = self.link.add(link_bytes, comm)
            self.setting = self.control.update(rate)
        self.throughput = self.link.rate
        return self.setting

    def describe(self):
        """Short text for progress lines."""
        rate = f"{8 * self.throughput / 1e6:.1f} Mbit/s" if self.throughput else "?"
        if self.link.fitted:
            rate += f" + {1e3 * self.link.latency:.1f} ms"
        if isinstance(self.compressor, ControlledThreeLC):
            limit = f" ({self.control.limited_by} over budget)" if self.control.limited_by else ""
            return f"s {self.setting:.2f} at {rate}{limit}"
        levels = self.setting
        mean = sum(lv * n for lv, (_, n) in zip(levels, self.layers)) / max(
            1, sum(n for _, n in self.layers))
        return f"levels {min(levels)}-{max(levels)} (mean {mean:.1f} bits) at {rate}"

    def record(self):
        """JSON-able state for the run summary's curve."""
        out = {"link_bytes_per_s": self.throughput, "link_latency_seconds": self.link.latency,
               "link_fit": self.link.how, "ratio_bytes_per_s": self.ratio_estimate,
               "compute_seconds": self.compute_seconds}
        if isinstance(self.compressor, ControlledThreeLC):
            out.update(s=self.setting, limited_by=self.control.limited_by,
                       predicted_push_seconds=self.control.predicted_seconds,
                       probing=self.control.probing)
        else:
            out["levels"] = list(self.setting)
            if self.control is not None:  # what the levels were chosen from, with the rate
                out.update(layer_elements=list(self.control.layer_elements),
                           ready_seconds=list(self.control.ready_times),
                           tail_seconds=self.control.tail_seconds)
        return out
