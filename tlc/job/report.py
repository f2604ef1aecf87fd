"""The end of a local run in a few human lines (the full record is summary.json)."""
import os
import sys

from tlc.job import flagcheck, plots, trace

MAX_LINES = 15


def finish(summary, logdir):
    """Draws the run's plots and returns the summary text to print."""
    try:
        drawn = plots.write(logdir)
    except Exception as e:  # pylint: disable=broad-except
        # A plotting problem must not turn a finished run into a failed one.
        print(f"tlc: plots not drawn: {type(e).__name__}: {e}", file=sys.stderr)
        drawn = []
    return "\n".join(lines(summary, logdir, drawn))


def lines(summary, logdir, drawn=()):
    """At most MAX_LINES lines: the result, the traffic, where everything is."""
    s = summary
    steps = s.get("worker_steps") or 0
    workers = len(s.get("workers") or [])
    if s.get("ok"):
        pull = s.get("pull_compressor")
        pull = f" (pulls: {pull})" if pull and pull != s.get("compressor") else ""
        out = [f"tlc: done: {s.get('global_step')} steps of {s.get('model')} with "
               f"{s.get('compressor')}{pull} on {workers} workers"]
    elif s.get("stop_reason"):  # stopped by the launcher, no task failed (--timeout)
        out = [f"tlc: STOPPED: {s['stop_reason']}, {workers} worker reports (the task logs "
               "are in the run directory)"]
    else:
        failed = s.get("failed_tasks")  # not the tasks the launcher stopped because of them
        if failed is None:
            failed = {task: code for task, code in (s.get("exit_codes") or {}).items() if code}
        out = [f"tlc: FAILED: {', '.join(failed) or 'a task'} exited with an error, "
               f"{workers} worker reports (the task logs are in the run directory)"]
    if s.get("test_accuracy") is not None:
        out.append(f"  test accuracy      {s['test_accuracy']:.4f}   (final training loss "
                   f"{_number(s.get('final_loss'))})")
    for direction in ("pushed", "pulled"):
        total = s.get(f"bytes_{direction}") or 0
        per_step = total / steps if steps else 0
        if not steps:
            break
        out.append(f"  {direction} per step   {_bytes(per_step):>10} per worker step   "
                   f"total {_bytes(total)}")
    if s.get("full_syncs"):
        out.append(f"  full copies        {s['full_syncs']} of the model in float32, "
                   f"{_bytes(s.get('full_sync_bytes') or 0)} (not in the figures above)")
    if s.get("compression_ratio"):
        out.append(f"  compression ratio  {s['compression_ratio']:.1f}x vs float32 "
                   f"(push {s['push_ratio']:.1f}x, pull {s['pull_ratio']:.1f}x)")
    breakdown = step_time_line(s.get("time_breakdown"), s.get("wire_under_compute"))
    if breakdown:
        out.append(breakdown)
    train = s.get("train_seconds")
    out.append(f"  wall time          {s.get('wall_seconds', 0):.1f} s"
               + (f" (chief trained for {train:.1f} s)" if train else ""))
    out.append(f"  run directory      {logdir}")
    out.append(f"  summary            {os.path.join(logdir, 'summary.json')}")
    checkpoints = os.path.join(logdir, "checkpoints")
    out.append(f"  checkpoints        {checkpoints if os.path.isdir(checkpoints) else 'none'}")
    if drawn:
        out.append(f"  plots              {', '.join(os.path.basename(p) for p in drawn)} "
                   f"(in the run directory)")
    tensorboard = os.path.join(logdir, "tensorboard")
    if os.path.isdir(tensorboard):
        out.append(f"  tensorboard        tensorboard --logdir {tensorboard}")
    return out[:MAX_LINES]


PHASE_LABELS = {"compute": "compute", "push_compress": "compress",  # tlc/optimizer/timing.py
                "push_and_wait": "push+wait", "pull_apply": "pull+apply",
                "ps_decompress_accumulate": "PS decompress", "ps_update": "PS update",
                "pull_compress": "pull compress"}


def _phase_ms(seconds):
    """A phase in ms: under 1 ms with a decimal (the PS's phases of a small
    model are 0.2-0.5 ms, not "0"). A phase is the difference of two clocks'
    stamps; one a hair below zero (-0.0002 s) printed as "-0": it is 0."""
    ms = 1000 * max(0.0, seconds)
    if ms == 0:
        return "0"
    return f"{ms:.1f}" if ms < 1 else f"{ms:.0f}"


def step_time_line(breakdown, wire=None):
    """'  step time  ...' in ms per worker step and per chief update, or None;
    with --trace_steps, how much of the wire ran under compute (trace.wire_line)."""
    if not breakdown or not breakdown.get("worker"):
        return None
    worker, update = breakdown["worker"], breakdown.get("update") or {}
    parts = [f"{PHASE_LABELS[k]} {_phase_ms(v)}" for k, v in {**worker, **update}.items()]
    total = sum(max(0.0, v) for v in list(worker.values())[:3])
    return f"  step time (ms)     {1000 * total:.0f} = " + ", ".join(parts[:3]) + \
        " (in them: " + ", ".join(parts[3:]) + ")" + (f"; {trace.wire_line(wire)}" if wire else "")


def launch_line(spec, flags, logdir):
    """The launcher's first line: the cluster, what compresses how (with s), the data."""
    return (f"tlc: launching {len(spec['ps'])} ps + {len(spec['worker'])} workers "
            f"({compression(flags)}, {flags.dataset}); logs in {logdir}")


def compression(flags):
    """E.g. '3lc s=1.75 block, pulls s=1.00' or 'float32': the push, then the pull if it differs."""
    if getattr(flags, "sync", "tlc") == "tf":
        return "TensorFlow's SyncReplicasOptimizer, float32"
    push = _compressor(flags.compressor, flags.sparsity_multiplier, flags)
    pull = _compressor(*flagcheck.pull_settings(flags), flags)
    return push if pull == push else f"{push}, pulls {pull}"


def _compressor(name, s, flags):
    if name == "3lc":
        return f"3lc s={s:.2f} {getattr(flags, 'scaling', 'tensor')}"
    if name == "3lc_auto":
        return "3lc s chosen live"
    return name


def _bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n:.0f} B"
        n /= 1024
    return f"{n:.1f} GiB"


def _number(value):
    return "?" if value is None else f"{value:.4f}"


def write_markdown_section(path, tag, heading, text):
    """Puts `## heading` + text between markers named `tag` in the markdown
    file `path` (created if missing), leaving the rest of the file alone."""
    begin, end = f"<!-- {tag}: {heading} -->", f"<!-- end {tag}: {heading} -->"
    block = f"{begin}\n## {heading}\n\n{text.strip()}\n{end}\n"
    try:
        with open(path, encoding="utf-8") as f:
            doc = f.read()
    except FileNotFoundError:
        doc = ""
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end) + 1:]
    else:
        doc = doc.rstrip("\n") + ("\n\n" if doc else "") + block
    with open(path, "w", encoding="utf-8") as f:
        f.write(doc)


def seconds_per_step(points, warmup):
    """Mean seconds per step after `warmup` steps: from the end of the first
    logged step >= warmup to the last one, less evaluation time in between."""
    timed = [p for p in points if p["step"] >= warmup]
    if len(timed) < 2 or timed[-1]["step"] == timed[0]["step"]:
        raise ValueError(f"too few logged steps after warm-up ({len(timed)})")
    evaluating = sum(p.get("eval_seconds", 0.0) for p in timed[:-1])
    return (timed[-1]["time"] - timed[0]["time"] - evaluating) / (
        timed[-1]["step"] - timed[0]["step"])
