"""What a new user sees: early one-line flag errors, a set-up that does nothing
heavy when nothing changed, a short readable end of run with plots, and no
TensorFlow start-up noise. Real scripts and processes throughout."""
import json
import os
import re
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

import slow_writes
from tlc.job import flagcheck, plots, report

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOISE = ("Graph was finalized", "local_init_op", "deprecat", "Instructions for updating",
         "oneDNN", "absl::InitializeLog", "cpu_feature_guard", "Coordinator stopped")


def test_static_names_match_the_registries():
    from tlc import compressors  # pylint: disable=import-outside-toplevel
    from tlc.job import data, models  # pylint: disable=import-outside-toplevel
    assert list(flagcheck.COMPRESSOR_NAMES) == compressors.names()
    assert list(flagcheck.MODELS) == sorted(models.MODELS)
    assert list(flagcheck.DATASETS) == sorted(data.DATASETS)
    from tlc.optimizer import channel  # pylint: disable=import-outside-toplevel
    assert flagcheck.MAX_PUSH_BUCKETS == channel.MAX_BUCKETS


@pytest.mark.parametrize("command", [
    ["bash", "scripts/train.sh"],
    [sys.executable, "-m", "tlc.train"],
])
def test_bad_flag_is_one_line_before_tensorflow(command, no_tensorflow):
    proc = subprocess.run(command + ["--sparsity_multiplier=2.5"], cwd=ROOT, env=no_tensorflow,
                          capture_output=True, text=True, timeout=300)
    output = (proc.stdout + proc.stderr).splitlines()
    assert proc.returncode != 0
    assert len(output) <= 5, output
    errors = [line for line in output if "--sparsity_multiplier" in line]
    assert len(errors) == 1, output
    assert "[1, 2)" in errors[0] and "2.5" in errors[0] and "--helpfull" in errors[0]
    assert "TENSORFLOW WAS IMPORTED" not in proc.stderr and "Traceback" not in proc.stderr
    assert "setup: " not in proc.stderr  # refused before set-up


def test_unknown_flag_and_bad_compressor_are_one_line(no_tensorflow):
    for flag, words in (("--nope=1", ("nope",)),
                        ("--compressor=zip", ("--compressor=zip", "3lc", "sbc")),
                        ("--model=nope", ("--model", "small_cnn", "nope"))):
        proc = subprocess.run([sys.executable, "-m", "tlc.job.flagcheck", flag], cwd=ROOT,
                              env=no_tensorflow, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and proc.stdout == ""
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and all(w in lines[0] for w in words), lines


def test_setup_fast_path_imports_no_tensorflow(no_tensorflow):
    # Stamps up to date (builds only if this checkout is not built yet).
    subprocess.run(["bash", "scripts/setup.sh"], cwd=ROOT, check=True, capture_output=True,
                   timeout=3600)
    proc = subprocess.run(["bash", "scripts/setup.sh"], cwd=ROOT, env=no_tensorflow,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr  # no pip, no build, no TensorFlow
    assert proc.stdout.splitlines()[-1].endswith(("python3", "python"))


def test_setup_console_is_one_line_per_step_with_apt_output_in_the_log(tmp_path):
    """A copy of the checkout (built, stamps current) on a PATH without `ip`:
    setup.sh's apt steps run a stand-in apt-get that prints 300 lines and
    takes a while; the console shows one line per step plus "still" lines,
    build/setup.log the 600 lines. Bazel is not asked for."""
    subprocess.run(["bash", "scripts/setup.sh"], cwd=ROOT, check=True, capture_output=True,
                   timeout=3600)
    copy = tmp_path / "repo"
    shutil.copytree(ROOT, copy, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "runs", "__pycache__", "temp.*", "lib.*", "setup.log"))
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("bash", "dirname", "mkdir", "date", "sleep", "tail", "id", "sha256sum", "cut",
                 "cat", "find", "sort", "ls", "nproc", "tee", "grep", "env", "g++", "rm"):
        os.symlink(shutil.which(tool), tools / tool)
    release = tmp_path / "release"  # the stand-in apt-get runs until this file exists
    (tools / "apt-get").write_text(
        "#!/bin/bash\necho \"$*\" >> %s\nfor i in $(seq 300); do echo \"Unpacking $i\"; done\n"
        "while [ ! -e %s ]; do sleep 0.05; done\n" % (tmp_path / "apt-calls", release))
    (tools / "apt-get").chmod(0o755)
    os.symlink(shutil.which("seq"), tools / "seq")
    proc = subprocess.Popen(["bash", "scripts/setup.sh"], cwd=copy, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PATH": str(tools), "PYTHON": sys.executable,
                                 "TLC_PROGRESS_SECS": "0.2"})
    console = []
    for line in proc.stderr:  # released once the first step has said it is still running
        console.append(line.rstrip("\n"))
        if line.startswith("setup: still apt-get"):
            release.touch()
    proc.wait(300)
    assert proc.returncode == 0, console
    steps = [line for line in console if not line.startswith("setup: still ")]
    assert steps == ["setup: apt-get update", "setup: apt-get install iproute2"], console
    assert any(line.startswith("setup: still apt-get update (") for line in console), console
    calls = (tmp_path / "apt-calls").read_text().splitlines()
    assert calls == ["update", "install -y --no-install-recommends iproute2"]  # no bazel
    log = (copy / "build" / "setup.log").read_text()
    assert log.count("Unpacking") == 600 and "=== " in log


def test_build_is_parallel_with_a_line_per_file(tmp_path):
    """The build of a copy of the sources: every object file announced once,
    each link too; with a 0.05 s progress interval, "still compiling" lines
    name files (TensorFlow's headers alone take seconds); every line whole
    although the ticker and the compile threads write at once."""
    for name in ("setup.py", "requirements.txt", "custom_ops", "tlc"):  # requirements: the TF pin
        src = os.path.join(ROOT, name)
        dst = tmp_path / name
        if os.path.isdir(src):
            subprocess.run(["cp", "-r", src, str(dst)], check=True)
        else:
            subprocess.run(["cp", src, str(dst)], check=True)
    for so in (tmp_path / "tlc").glob("*.so"):
        so.unlink()
    # A few of the sources, each kind: what is checked is the build's lines, and
    # building all 23 compile jobs again (setup.sh just did) took ~3 minutes of CI
    # on 2 busy cores. The libraries link (a shared object may leave symbols for
    # its loader); nothing loads them.
    kept = {"core/base3.cc", "core/zero_run.cc", "tf/message_ops.cc", "python/codec_module.cc"}
    for source in (tmp_path / "custom_ops").rglob("*.cc"):
        if str(source.relative_to(tmp_path / "custom_ops")) not in kept:
            source.unlink()
    # Every write to stderr takes 20 ms: a line written in two parts (text,
    # then newline) would have the ticker's line land inside it.
    slow_stderr = slow_writes.prelude("stderr", 0.02) + (
        "import runpy, sys\n"
        "sys.argv = ['setup.py', '-q', 'build_ext', '--inplace']\n"
        "runpy.run_path('setup.py', run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", slow_stderr],
                          cwd=tmp_path, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "TLC_PROGRESS_SECS": "0.05"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    ours = [line for line in proc.stderr.splitlines() if "setup: " in line]
    whole = re.compile(r"setup: (\[\d+/\d+\] compiling \S+ \(\S+\)|still .+ \d+ s"
                       r"|linking \S+ \(\S+\)|building the ops against \S+ \S+)")
    assert [line for line in ours if not whole.fullmatch(line)] == [], proc.stderr[-3000:]
    progress = re.findall(r"^setup: \[(\d+)/(\d+)\] compiling (\S+) \((\S+)\)$", proc.stderr,
                          re.MULTILINE)
    sources = sorted(str(p.relative_to(tmp_path)) for p in (tmp_path / "custom_ops").rglob("*.cc")
                     if p.parent.name in ("core", "tf", "python"))
    core = [s for s in sources if "/core/" in s]
    assert [int(n) for n, _, _, _ in progress] == list(range(1, len(progress) + 1))
    assert {int(total) for _, total, _, _ in progress} == {len(progress)}
    assert sorted(f for _, _, f, ext in progress if ext == "tlc._codec") == \
        sorted(core + ["custom_ops/python/codec_module.cc"])
    assert sorted(f for _, _, f, ext in progress if ext == "tlc._tlc_ops") == \
        sorted(core + [s for s in sources if "/tf/" in s])
    assert re.search(r"^setup: still compiling custom_ops/\S+\.cc \(tlc\._\w+\) \d+ s",
                     proc.stderr, re.MULTILINE), proc.stderr
    for library in ("_tlc_ops.so (tlc._tlc_ops)", "_codec"):
        assert f"setup: linking {library}" in proc.stderr, proc.stderr
    assert (tmp_path / "tlc" / "_tlc_ops.so").exists()
    assert list((tmp_path / "tlc").glob("_codec*.so"))


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """A real 30-step run; the launcher process logs its imports (-X importtime)."""
    logdir = tmp_path_factory.mktemp("short") / "run"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tlc.train",
         "--flagfile=configs/fashion_mnist.cfg", "--steps=30", "--log_every=10",
         "--eval_every=20", f"--logdir={logdir}"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, logdir


def test_stdout_is_progress_then_a_short_summary(short_run):
    proc, logdir = short_run
    lines = proc.stdout.splitlines()
    assert not any(line.strip() in ("{", "}") or '"ok":' in line for line in lines)
    start = next(i for i, line in enumerate(lines) if line.startswith("tlc: done"))
    summary = lines[start:]
    assert len(summary) <= report.MAX_LINES, summary
    assert any(line.startswith("step ") for line in lines[:start])
    # The first copies came before the first log point: no window names them.
    assert not any("full copies" in line for line in lines[:start])
    assert lines[0].startswith("tlc: launching 1 ps + 2 workers (3lc s=1.00 "), lines[0]
    text = "\n".join(summary)
    for what in ("test accuracy", "pushed per step", "pulled per step", "compression ratio",
                 "wall time", "run directory", "summary", "checkpoints", "plots"):
        assert what in text, text
    # Each worker's first copy of the model, outside the pulled bytes (2 x 6.6 MB).
    copies = re.search(r"full copies +(\d+) of the model in float32, ([\d.]+) MiB", text)
    assert copies and int(copies[1]) >= 2 and float(copies[2]) > 2 * 6.0, text
    named = [line.split(None, 2)[-1] for line in summary if str(logdir) in line]
    paths = [re.split(r"\s+\(", n)[0].split()[-1] for n in named]
    assert str(logdir / "summary.json") in paths
    assert all(os.path.exists(p) for p in paths), paths
    plot_line = next(line for line in summary if line.strip().startswith("plots"))
    for name in plots.PLOTS:
        assert name in plot_line and (logdir / name).exists()
    with open(logdir / "summary.json", encoding="utf-8") as f:
        full = json.load(f)
    assert f"{full['test_accuracy']:.4f}" in text


def test_no_tensorflow_noise_and_no_tensorflow_in_the_launcher(short_run):
    proc, logdir = short_run
    launcher_stderr = [line for line in proc.stderr.splitlines()
                       if not line.startswith("import time:")]
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")]
    assert "tlc.job.launcher" in imported
    assert not [m for m in imported if m.split(".")[0] == "tensorflow"]
    logs = [(logdir / f"{task}.log").read_text() for task in ("ps0", "worker0", "worker1")]
    for text in [proc.stdout, "\n".join(launcher_stderr), *logs]:
        assert not [n for n in NOISE if n in text], text[-3000:]


def _pixels_near(path, rgb, tolerance=0.08):
    import matplotlib.image  # pylint: disable=import-outside-toplevel
    image = matplotlib.image.imread(path)[..., :3]
    return int((np.abs(image - np.asarray(rgb) / 255).max(axis=-1) < tolerance).sum())


def test_plots_are_pngs_with_the_runs_data(short_run):
    _, logdir = short_run
    with open(logdir / plots.STEPS_FILE, encoding="utf-8") as f:
        steps = json.load(f)
    assert steps["step"][-1] == 30 and len(steps["step"]) >= 15
    assert all(np.isfinite(steps["loss"])) and min(steps["bytes_pushed"]) > 0
    with open(logdir / "worker0.json", encoding="utf-8") as f:
        assert any("accuracy" in p for p in json.load(f)["curve"])  # --eval_every=20
    # Each plot's line colour (matplotlib's tab:blue / tab:green / tab:orange) is drawn.
    colours = {"loss.png": (31, 119, 180), "accuracy.png": (44, 160, 44),
               "traffic.png": (255, 127, 14)}
    for name, rgb in colours.items():
        path = logdir / name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert _pixels_near(path, rgb) > 100, name


def test_summary_of_a_failed_run_names_the_failed_tasks():
    lines = report.lines({"ok": False, "exit_codes": {"ps0": 0, "worker0": 1}, "workers": [],
                          "wall_seconds": 3.0}, "/nonexistent")
    assert lines[0].startswith("tlc: FAILED: worker0 exited") and len(lines) <= report.MAX_LINES
    assert not [line for line in lines if "per step" in line or "None" in line], lines


def test_a_failing_task_still_shows_its_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tlc.train", "--flagfile=configs/fashion_mnist.cfg",
         "--learning_rate=1e12", "--steps=200", f"--logdir={tmp_path / 'run'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode != 0
    assert "training step failed" in proc.stdout  # the chief's error line, echoed
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("tlc: FAILED: "))
    assert len(lines) - start <= report.MAX_LINES
    assert "tlc: failed tasks: worker0 (exit 1)" in proc.stderr
    assert "see their logs" in proc.stderr
    assert "ps0" not in lines[start]  # stopped by the launcher, not failed


def test_quiet_import_drops_only_the_start_up_notices():
    from tlc.job import quiet  # pylint: disable=import-outside-toplevel
    notices = ("WARNING: All log messages before absl::InitializeLog() is called are written to "
               "STDERR\nI0000 00:00:1795528120.880766   32186 port.cc:153] oneDNN custom "
               "operations are on. You may see slightly different numerical results.\n")
    real = "E0000 00:00:1.0 1 op_kernel.cc:1] something broke\nTraceback (most recent call last):\n"
    assert quiet.drop_notices(notices + real + notices) == real


def test_a_task_imports_tensorflow_without_keras_or_pyplot():
    """A task imports TF through quiet.import_tensorflow; TF's eager import of
    Keras 3's optimizers (with matplotlib.pyplot) cost each task ~2 s of CPU."""
    code = ("import sys; from tlc.job import quiet; quiet.import_tensorflow(); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'keras', 'matplotlib'}))")
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]", proc.stdout


def test_step_time_line_prints_a_phase_a_hair_below_zero_as_0():
    # Seen in a run: the chief's update phases are differences of stamps.
    breakdown = {"worker": {"compute": 0.0121, "push_and_wait": 0.0402, "pull_apply": 0.0035,
                            "push_compress": 0.0011},
                 "update": {"ps_decompress_accumulate": 0.0009, "ps_update": -0.0002,
                            "pull_compress": 0.0007}}
    line = report.step_time_line(breakdown)
    assert "-0" not in line and "PS update 0," in line, line
    assert line.startswith("  step time (ms)     56 = compute 12, push+wait 40, pull+apply 4"), line


def test_step_time_line_gives_phases_under_a_millisecond_a_decimal():
    # Seen in a run: "PS decompress 0, PS update 0" for 0.20 and 0.32 ms.
    breakdown = {"worker": {"compute": 0.1533, "push_and_wait": 0.0122, "pull_apply": 0.0035,
                            "push_compress": 0.0039, "ps_decompress_accumulate": 0.000199},
                 "update": {"ps_update": 0.000321, "pull_compress": 0.000513}}
    line = report.step_time_line(breakdown)
    assert line == ("  step time (ms)     169 = compute 153, push+wait 12, pull+apply 4 (in them: "
                    "compress 4, PS decompress 0.2, PS update 0.3, pull compress 0.5)"), line


def test_launch_line_says_the_compression_and_its_s():
    spec = {"ps": ["a:1"], "worker": ["b:1", "c:1"]}

    def flags(**values):
        base = {"sync": "tlc", "compressor": "3lc", "sparsity_multiplier": 1.0,
                "pull_compressor": None, "pull_sparsity_multiplier": None, "scaling": "tensor",
                "dataset": "fashion_mnist"}
        return types.SimpleNamespace(**{**base, **values})

    assert report.launch_line(spec, flags(), "/r") == \
        "tlc: launching 1 ps + 2 workers (3lc s=1.00 tensor, fashion_mnist); logs in /r"
    assert "(3lc s=1.75 block, pulls 3lc s=1.00 block, " in report.launch_line(
        spec, flags(sparsity_multiplier=1.75, pull_sparsity_multiplier=1.0, scaling="block"), "/r")
    assert "(float32, " in report.launch_line(spec, flags(compressor="float32"), "/r")
    assert "(TensorFlow's SyncReplicasOptimizer, float32, " in report.launch_line(
        spec, flags(sync="tf"), "/r")
