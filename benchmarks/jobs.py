"""Running the main job from a benchmark or a test: one `python -m tlc.train`
run in a subprocess, and a finished earlier run found again (moved here from
tlc/job/launcher.py, which holds only what the job itself runs)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout


def run_job(flags, logdir, timeout=3600):
    """Runs the main job (`python -m tlc.train`) in a subprocess from the
    project root; returns (summary, stdout). Raises RuntimeError with the
    output's tail if it fails."""
    cmd = [sys.executable, "-m", "tlc.train", *flags, f"--logdir={logdir}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    with open(os.path.join(logdir, "summary.json"), encoding="utf-8") as f:
        return json.load(f), proc.stdout


def finished_run(logdir, steps):
    """The summary of an earlier run in `logdir` that finished exactly `steps`
    steps, or None (missing, failed, another length): lets a benchmark resume.
    The caller keeps one directory per set of flags."""
    try:
        with open(os.path.join(logdir, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError):
        return None
    if not summary.get("ok") or summary.get("global_step") != steps:
        return None
    return summary
