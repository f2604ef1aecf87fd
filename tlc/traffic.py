"""Bytes a worker pushes and pulls, in your own job: a SessionRunHook.

    opt = tlc.SyncReplicasOptimizer(...)
    train_op = opt.minimize(loss, global_step=global_step)
    hooks = [opt.make_session_run_hook(is_chief, num_tokens=0),
             tlc.traffic.TrafficHook(opt, every_n_steps=100, summary_dir="runs/tb")]

Every `every_n_steps` of this worker's steps (and once at the end) it logs one
line with the bytes pushed and pulled per step over that interval and how many
times fewer they are than float32's, and writes the same figures as
TensorBoard scalars under `summary_dir` (none if it is None). It reads only
the optimizer's public counters (`traffic`), in a session run of its own after
the step, so it never adds work to a run: fetching `step_traffic` from a hook
would run a training step in every `sess.run` the user makes (an evaluation,
say).
"""
import tensorflow as tf

COUNTERS = ("bytes_pushed", "bytes_pulled", "worker_steps")
# TensorBoard tags, under "tlc/".
TAGS = ("push_bytes_per_step", "pull_bytes_per_step", "compression_ratio",
        "bytes_pushed", "bytes_pulled")


def _print(line):
    print(line, flush=True)


class TrafficHook(tf.compat.v1.train.SessionRunHook):
    """Logs this worker's pushed / pulled bytes per step and the ratio against
    float32; writes them as TensorBoard scalars.

    The ratio is 2 x float32 bytes per step / (pushed + pulled per step): a
    float32 worker pushes its gradients and pulls the model, each the model's
    size. The scalars' step is the global step read with the counters.
    """

    def __init__(self, optimizer, every_n_steps=100, summary_dir=None, log=_print):
        if not isinstance(every_n_steps, int) or isinstance(every_n_steps, bool) \
                or every_n_steps < 1:
            raise ValueError(f"TrafficHook: every_n_steps must be an integer >= 1, "
                             f"got {every_n_steps!r}")
        self._optimizer = optimizer
        self._every = every_n_steps
        self._summary_dir = summary_dir
        self._log = log
        self._writer = None
        self._last = None       # counters at the last log line
        self.records = []       # every logged interval, as dicts (for the caller)

    def begin(self):
        try:
            traffic = self._optimizer.traffic
        except (AttributeError, ValueError, RuntimeError) as e:
            raise ValueError("TrafficHook: the optimizer has no traffic counters yet; build "
                             f"the train op (minimize / apply_gradients) first ({e})") from e
        self._counters = {k: traffic[k] for k in COUNTERS}
        self._float32 = traffic["float32_bytes_per_step"]
        self._global_step = tf.compat.v1.train.get_global_step()
        if self._summary_dir is not None:
            self._writer = tf.compat.v1.summary.FileWriterCache.get(self._summary_dir)

    def after_create_session(self, session, coord):
        # The counters survive session re-creation: count from where they are.
        self._last = session.run(self._counters)
        self._float32_value = int(session.run(self._float32))

    def before_run(self, run_context):
        # A read of a local variable: cheap, adds no step. In the same run as
        # the train op it may read before or after the increment, so it only
        # decides when to log; the figures come from a run of their own.
        return tf.compat.v1.train.SessionRunArgs(self._counters["worker_steps"])

    def after_run(self, run_context, run_values):
        # The read may precede this run's increment by one: near the interval's
        # end, read the counter again in a run of its own to decide.
        if run_values.results + 1 - self._last["worker_steps"] >= self._every:
            steps = run_context.session.run(self._counters["worker_steps"])
            if steps - self._last["worker_steps"] >= self._every:
                self._record(run_context.session)

    def end(self, session):
        if session.run(self._counters["worker_steps"]) > self._last["worker_steps"]:
            self._record(session)
        if self._writer is not None:
            self._writer.flush()

    def _record(self, session):
        fetches = dict(self._counters)
        if self._global_step is not None:
            fetches["global_step"] = self._global_step
        now = session.run(fetches)
        steps = int(now["worker_steps"] - self._last["worker_steps"])
        if steps <= 0:
            return
        push = (now["bytes_pushed"] - self._last["bytes_pushed"]) / steps
        pull = (now["bytes_pulled"] - self._last["bytes_pulled"]) / steps
        ratio = 2 * self._float32_value / max(1.0, push + pull)
        step = int(now.get("global_step", now["worker_steps"]))
        record = {"step": step, "worker_steps": int(now["worker_steps"]), "steps": steps,
                  "push_bytes_per_step": push, "pull_bytes_per_step": pull,
                  "compression_ratio": ratio, "bytes_pushed": int(now["bytes_pushed"]),
                  "bytes_pulled": int(now["bytes_pulled"]),
                  "float32_bytes_per_step": self._float32_value}
        self.records.append(record)
        self._log(f"tlc traffic: step {step}: pushed {push:,.0f} B/step, pulled {pull:,.0f} "
                  f"B/step over {steps} steps; {ratio:.1f}x fewer than float32 "
                  f"({2 * self._float32_value:,} B/step)")
        if self._writer is not None:
            self._writer.add_summary(tf.compat.v1.Summary(value=[
                tf.compat.v1.Summary.Value(tag=f"tlc/{tag}", simple_value=float(record[tag]))
                for tag in TAGS]), step)
        self._last = now
