"""Every flag of the main job refused in one line before anything starts.

Each row runs the real entry point (`python -m tlc.train` with the flag
files scripts/train.sh passes) with one bad value and checks: a non-zero
exit code, exactly one line of output, naming the flag, no traceback, no
run directory written and no task process left. Rows without TensorFlow in
their check run where `import tensorflow` fails, so they also show the
check comes before TensorFlow. The rows run a few at a time (they are
independent processes), which keeps the table fast on a busy machine.
"""
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tlc.job import flagcheck

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = ["--flagfile=configs/fashion_mnist.cfg", "--flagfile=configs/3lc_s1.00.cfg"]
CLUSTER = '{"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}'

# (flag the line must name, bad arguments). The first ten are issue 22's.
ROWS = [
    ("--checkpoint_secs", ["--checkpoint_secs=-5"]),
    ("--learning_rate", ["--learning_rate=nan"]),
    ("--learning_rate", ["--learning_rate=inf"]),
    ("--seed", ["--seed=-1"]),
    ("--batch_size", ["--batch_size=100000"]),
    ("--netem_rate", ["--netem_rate=abc"]),
    ("--timeout", ["--timeout=-1"]),
    ("--unreachable_timeout", ["--unreachable_timeout=-1"]),
    ("--momentum", ["--momentum=-1"]),
    ("--block_size", ["--block_size=-5", "--scaling=tensor"]),
    # Every other flag.
    ("--cluster", ["--cluster={not json", "--job_name=ps"]),
    ("--cluster", [f"--cluster={CLUSTER}", "--job_name=worker", "--task_index=3"]),
    ("--job_name", ["--job_name=chief"]),
    ("--job_name", ["--job_name=worker"]),  # without --cluster
    ("--task_index", ["--task_index=-1"]),
    ("--num_ps", ["--num_ps=0"]),
    ("--num_workers", ["--num_workers=0"]),
    ("--backup_workers", ["--backup_workers=2"]),
    ("--backup_workers", ["--backup_workers=-1"]),
    ("--netem_rate", ["--netem_rate=1bit"]),
    ("--netem_rate_changes", ["--netem_rate_changes=60:10mbit"]),
    ("--netem_rate_changes", ["--netem_rate=10mbit", "--netem_rate_changes=soon:10mbit"]),
    ("--netem_delay", ["--netem_rate=10mbit", "--netem_delay=abc"]),
    ("--netem_delay", ["--netem_delay=1ms"]),  # without --netem_rate
    ("--dataset", ["--dataset=mnist"]),
    ("--data_dir", ["--data_dir=/nonexistent/tlc-data"]),
    ("--model", ["--model=vgg16"]),
    ("--batch_size", ["--batch_size=0"]),
    ("--batch_size", ["--batch_size=lots"]),
    ("--steps", ["--steps=0"]),
    ("--optimizer", ["--optimizer=rmsprop"]),
    ("--learning_rate", ["--learning_rate=0"]),
    ("--momentum", ["--momentum=1"]),
    ("--momentum", ["--momentum=nan"]),
    ("--weight_decay", ["--weight_decay=-1e-4"]),
    ("--weight_decay", ["--weight_decay=inf"]),
    ("--sync", ["--sync=nccl"]),
    ("--sync", ["--sync=tf"]),  # with 3lc
    ("--compressor", ["--compressor=zip"]),
    ("--sparsity_multiplier", ["--sparsity_multiplier=2.5"]),
    ("--sparsity_multiplier", ["--sparsity_multiplier=nan"]),
    ("--adaptive", ["--adaptive=maybe"]),
    ("--scaling", ["--scaling=row"]),
    ("--statistics", ["--statistics=chief"]),
    ("--block_size", ["--block_size=999"]),
    ("--compressor_args", ["--compressor_args=p"]),
    ("--compressor_args", ["--compressor=sbc", "--compressor_args=nope=1"]),  # imports TF
    ("--push_budget", ["--push_budget=0"]),
    ("--push_budget", ["--compressor=3lc_auto"]),  # needs one
    ("--pull_compressor", ["--pull_compressor=zip"]),
    ("--pull_sparsity_multiplier", ["--pull_sparsity_multiplier=2"]),
    ("--pull_sparsity_multiplier", ["--pull_compressor=float32",
                                    "--pull_sparsity_multiplier=1.5"]),
    ("--compress_threshold", ["--compress_threshold=-1"]),
    ("--push_buckets", ["--push_buckets=0"]),
    ("--logdir", ["--logdir=/proc/tlc-run"]),
    ("--log_every", ["--log_every=0"]),
    ("--trace_steps", ["--trace_steps=-1"]),
    ("--checkpoint_steps", ["--checkpoint_steps=-1"]),
    ("--checkpoint_secs", ["--checkpoint_secs=inf"]),
    ("--unreachable_timeout", ["--unreachable_timeout=nan"]),
    ("--stall_timeout", ["--stall_timeout=0"]),
    ("--eval_batch", ["--eval_batch=0"]),
    ("--eval_every", ["--eval_every=-1"]),
    ("--eval_examples", ["--eval_examples=0"]),
    ("--seed", ["--seed=2147483648"]),
    ("--seed", ["--seed=abc"]),
    ("--timeout", ["--timeout=inf"]),
    ("--nope", ["--nope=1"]),  # no such flag
]
NEEDS_TF = {"--compressor_args=nope=1"}  # builds the compressor: the only check needing TF


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, no_tensorflow):
    """Runs every row: {row index: (exit code, output lines, run directory)}."""
    base = tmp_path_factory.mktemp("bad_flags")

    def run(i):
        flag, args = ROWS[i]
        logdir = base / f"run{i}"
        given = [a for a in args if a.startswith("--logdir")]
        argv = [sys.executable, "-m", "tlc.train", *BASE, *args]
        if not given:
            argv.append(f"--logdir={logdir}")
        env = None if NEEDS_TF & set(args) else no_tensorflow
        proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=600)
        lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
        return i, (proc.returncode, lines, given[0].split("=", 1)[1] if given else str(logdir))

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(run, range(len(ROWS))))


@pytest.mark.parametrize("row", range(len(ROWS)), ids=[" ".join(a) for _, a in ROWS])
def test_bad_flag_is_refused_in_one_line_before_anything_starts(row, outcomes):
    flag, args = ROWS[row]
    code, lines, logdir = outcomes[row]
    assert code != 0, lines
    assert len(lines) == 1, lines
    assert flag in lines[0], lines
    assert "Traceback" not in lines[0] and "TENSORFLOW WAS IMPORTED" not in lines[0]
    assert not os.path.exists(logdir), f"{logdir} was written"
    left = subprocess.run(["pgrep", "-f", "--", f"--logdir={logdir}"], capture_output=True,
                          text=True).stdout.split()
    assert not left, f"task processes left: {left}"


def test_the_table_covers_every_flag():
    from absl import flags as absl_flags  # pylint: disable=import-outside-toplevel

    from tlc.job import flags as job_flags  # noqa: F401  pylint: disable=import-outside-toplevel
    defined = {f.name for f in absl_flags.FLAGS.flags_by_module_dict()["tlc.job.flags"]}
    assert set(flagcheck.ALLOWED) == defined
    named = {flag.lstrip("-") for flag, _ in ROWS}
    assert defined <= named, f"flags without a bad value in the table: {defined - named}"


def test_defaults_and_the_shipped_configs_pass():
    for config in sorted(os.listdir(os.path.join(ROOT, "configs"))):
        if not config.endswith(".cfg"):
            continue
        proc = subprocess.run([sys.executable, "-m", "tlc.job.flagcheck", *BASE,
                               f"--flagfile=configs/{config}"], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0 and proc.stderr == "", (config, proc.stderr)


def test_training_examples_match_the_dataset():
    from tlc.job import data  # pylint: disable=import-outside-toplevel
    assert set(flagcheck.TRAIN_EXAMPLES) == set(data.DATASETS)
    if not os.path.isdir(data.FASHION_MNIST_DIR):
        pytest.skip("Debian package dataset-fashion-mnist not installed")
    assert len(data.load("fashion_mnist").train_x) == flagcheck.TRAIN_EXAMPLES["fashion_mnist"]
