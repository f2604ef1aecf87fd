"""PNG plots of a finished run, drawn from what the chief recorded.

worker0_steps.json holds every step of the chief (loss, bytes pushed and
pulled); worker0.json holds its test accuracies (periodic with --eval_every,
and the final one on the whole test set). With --trace_steps, each worker's
report holds its traced steps' phases (tlc/job/trace.py): TIMELINE.
"""
import glob
import json
import os

import numpy as np

STEPS_FILE = "worker0_steps.json"
PLOTS = ("loss.png", "accuracy.png", "traffic.png")
TIMELINE = "timeline.png"
PHASE_COLOURS = {"compute": "tab:blue", "push": "tab:orange", "wait": "tab:gray",
                 "pull": "tab:green"}
WALL_TIME = "wall time since the chief started (s)"


def write(logdir):
    """Draws PLOTS into logdir; returns their paths (none without the chief's record)."""
    steps_path = os.path.join(logdir, STEPS_FILE)
    if not os.path.exists(steps_path):
        return []
    with open(steps_path, encoding="utf-8") as f:
        steps = json.load(f)
    with open(os.path.join(logdir, "worker0.json"), encoding="utf-8") as f:
        chief = json.load(f)
    if not steps["step"]:
        return []
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    drawings = (_loss, _accuracy, _traffic)
    paths = []
    for name, draw in zip(PLOTS, drawings):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4), squeeze=False)
        draw(axes[0], steps, chief)
        fig.suptitle(f"{chief.get('model')} with {chief.get('compressor')}: {name[:-4]}")
        fig.tight_layout()
        path = os.path.join(logdir, name)
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    traced = _traced_steps(logdir)
    if traced:
        paths.append(timeline(traced, os.path.join(logdir, TIMELINE), chief, plt))
    return paths


def _traced_steps(logdir):
    """{worker index: its traced steps' phases} from the workers' reports."""
    traced = {}
    for path in glob.glob(os.path.join(logdir, "worker*.json")):
        if path.endswith("_steps.json"):
            continue
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
        if report.get("trace"):
            traced[report["task"]] = report["trace"]["steps"]
    return traced


def timeline(traced, path, chief, plt):
    """One row per worker, a lane per phase, a bar per interval, on one
    wall-clock axis (ms since the first traced step began)."""
    origin = min(a for steps in traced.values() for s in steps for p in PHASE_COLOURS
                 for a, _ in s[p])
    lane = 0.8 / len(PHASE_COLOURS)
    fig, ax = plt.subplots(figsize=(12, 1.2 + 1.1 * len(traced)))
    for row, index in enumerate(sorted(traced)):
        for step in traced[index]:
            for k, (phase, colour) in enumerate(PHASE_COLOURS.items()):
                bars = [(1000 * (a - origin), 1000 * (b - a)) for a, b in step[phase]]
                # A bar under a pixel still shows: at least a hairline.
                ax.broken_barh(bars, (row - 0.4 + k * lane, lane * 0.9), facecolors=colour,
                               edgecolor=colour, linewidth=0.5,
                               label=phase if row == 0 and step is traced[index][0] else None)
            start = min(a for p in PHASE_COLOURS for a, _ in step[p])
            ax.text(1000 * (start - origin), row + 0.42, f"step {step['step']}", fontsize=8)
    ax.set_yticks(range(len(traced)))
    ax.set_yticklabels([f"worker {i}" for i in sorted(traced)])
    ax.set_ylim(len(traced) - 0.45, -0.6)
    ax.set_xlabel("wall time since the first traced step began (ms)")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(loc="upper right", ncol=4, fontsize=8)
    fig.suptitle(f"{chief.get('model')} with {chief.get('compressor')}: traced steps "
                 "(compute / push / wait / pull)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _smooth(values):
    """Moving average over ~1/50 of the run (the raw per-step loss is noisy)."""
    window = max(1, len(values) // 50)
    if window == 1:
        return np.asarray(values, dtype=float)
    padded = np.concatenate([np.full(window - 1, values[0]), values])
    return np.convolve(padded, np.ones(window) / window, mode="valid")


def _loss(axes, steps, _chief):
    for ax, x, label in ((axes[0], steps["step"], "global step"),
                         (axes[1], steps["seconds"], WALL_TIME)):
        ax.plot(x, steps["loss"], color="tab:blue", alpha=0.3, lw=0.8, label="per step")
        ax.plot(x, _smooth(steps["loss"]), color="tab:blue", lw=1.8, label="moving average")
        ax.set_xlabel(label)
        ax.set_ylabel("training loss (worker 0)")
        ax.grid(alpha=0.3)
        ax.legend()


def _accuracy(axes, steps, chief):
    start = steps["start_time"]
    periodic = [p for p in chief.get("curve", []) if "accuracy" in p]
    final = chief.get("test_accuracy")
    for ax, key, label in ((axes[0], "step", "global step"),
                           (axes[1], "time", WALL_TIME)):
        x = [p[key] - (start if key == "time" else 0) for p in periodic]
        if periodic:
            ax.plot(x, [p["accuracy"] for p in periodic], "o-", color="tab:green",
                    label="test subset (--eval_examples)")
        if final is not None:
            at = steps["step"][-1] if key == "step" else steps["seconds"][-1]  # after the last step
            ax.plot([at], [final], "*", ms=14, color="tab:red", label=f"final, whole test set: {final:.4f}")
        ax.set_xlim(0, max(steps["step"][-1] if key == "step" else steps["seconds"][-1], 1) * 1.05)
        ax.set_ylim(0, 1)
        ax.set_xlabel(label)
        ax.set_ylabel("test accuracy")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")


def _traffic(axes, steps, chief):
    float32 = chief.get("float32_bytes_per_step")
    for ax, direction in ((axes[0], "pushed"), (axes[1], "pulled")):
        kib = np.asarray(steps[f"bytes_{direction}"], dtype=float) / 1024
        ax.plot(steps["step"], kib, color="tab:orange", lw=1, label=f"bytes {direction}")
        if float32:
            ax.axhline(float32 / 1024, color="gray", ls="--", label="float32 (uncompressed)")
            ax.set_yscale("log")
        ax.set_xlabel("global step")
        ax.set_ylabel(f"KiB {direction} per step (worker 0)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(loc="center right")
