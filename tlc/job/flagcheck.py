"""Flag checks that need no TensorFlow, so a bad value is refused in a second.

scripts/train.sh runs `python -m tlc.job.flagcheck FLAGS...` before set-up;
the main job runs the same checks before it imports TensorFlow. Only the
check that builds the compressor (its --compressor_args) needs TensorFlow.
A refusal is one line on stderr and exit code 2, never absl's usage text.
"""
import math
import os
import sys

# tlc.compressors.names() without importing TensorFlow
# (tests/test_first_run.py::test_static_names_match_the_registries checks that they agree).
COMPRESSOR_NAMES = ("3lc", "3lc_auto", "aqgb", "aqgb_auto", "float32", "int8", "local2",
                    "mqe1bit", "sbc", "sparsify5", "ternary_stochastic", "variance")
# tlc.job.models.MODELS and tlc.job.data.DATASETS (also checked by the tests).
MODELS = ("mlp", "resnet110", "resnet20", "resnet32", "small_cnn")
DATASETS = ("cifar10", "fashion_mnist")
OPTIMIZERS = ("sgd", "momentum", "adam")
AT_LEAST_ONE = ("steps", "batch_size", "log_every", "num_ps", "num_workers", "eval_batch",
                "eval_examples")
MAX_PUSH_BUCKETS = 16  # tlc.optimizer.channel.MAX_BUCKETS (checked by the tests)
MAX_SEED = 2**31 - 1  # numpy and TF both take it; TF gets seed * 1000 + task
HINT = "see --helpfull for every flag"
HELP_FLAGS = ("-h", "-?", "--help", "--helpshort", "--helpfull", "--helpxml")


def parse_compressor_args(text):
    """'p=0.01,delay=2' -> {'p': 0.01, 'delay': 2} (numbers, true/false, or text)."""
    kwargs = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--compressor_args: expected key=value, got {item!r}")
        value = value.strip()
        for convert in (int, float):
            try:
                value = convert(value)
                break
            except ValueError:
                continue
        if value in ("true", "false"):
            value = value == "true"
        kwargs[key.strip()] = value
    return kwargs


# Every flag of tlc/job/flags.py and the values it allows (tests/test_bad_flags.py
# checks that none is left out). The checks in errors() use these words.
ALLOWED = {
    "cluster": "a cluster JSON text or file with 'ps' and 'worker' lists of host:port",
    "job_name": "ps or worker, with --cluster",
    "task_index": "an integer >= 0 within the --cluster job",
    "num_ps": "an integer >= 1",
    "num_workers": "an integer >= 1",
    "backup_workers": "an integer in [0, --num_workers)",
    "netem_rate": "a rate like 10mbit, 1gbit or 12mbps (8kbit to 10tbit) or unlimited",
    "netem_rate_changes": "seconds:rate or @step:rate items, with --netem_rate",
    "netem_delay": "a delay like 1ms, 500us or 0.1s (0 to 10s), with --netem_rate",
    "dataset": "one of " + ", ".join(DATASETS),
    "data_dir": "a directory holding the dataset (checked before any task starts)",
    "model": "one of " + ", ".join(MODELS),
    "batch_size": "an integer in [1, training examples of --dataset]",
    "steps": "an integer >= 1",
    "optimizer": "one of " + ", ".join(OPTIMIZERS),
    "learning_rate": "a finite number > 0",
    "momentum": "a number in [0, 1)",
    "weight_decay": "a finite number >= 0",
    "sync": "tlc or tf",
    "compressor": "one of " + ", ".join(COMPRESSOR_NAMES),
    "sparsity_multiplier": "a number in [1, 2)",
    "adaptive": "true or false",
    "scaling": "tensor or block",
    "block_size": "a positive multiple of 5",
    "compressor_args": "key=value items the compressor takes",
    "push_budget": "a finite number of seconds > 0",
    "pull_compressor": "one of " + ", ".join(COMPRESSOR_NAMES),
    "pull_sparsity_multiplier": "a number in [1, 2), with a 3lc model pull",
    "compress_threshold": "an integer >= 0",
    "push_buckets": f"an integer in [1, {MAX_PUSH_BUCKETS}]",
    "statistics": "worker or ps",
    "logdir": "a writable directory",
    "log_every": "an integer >= 1",
    "trace_steps": "an integer >= 0 (0: off)",
    "checkpoint_steps": "an integer >= 0 (0: not by steps)",
    "checkpoint_secs": "a finite number of seconds >= 0 (0: not by time)",
    "unreachable_timeout": "a finite number of seconds > 0",
    "stall_timeout": "a finite number of seconds > 0",
    "eval_batch": "an integer >= 1",
    "eval_every": "an integer >= 0 (0: only at the end)",
    "eval_examples": "an integer >= 1",
    "seed": f"an integer in [0, {MAX_SEED}]",
    "timeout": "a finite number of seconds > 0",
}
# Training examples of each dataset as distributed (a --data_dir holding fewer is
# caught by the task itself, in one line).
TRAIN_EXAMPLES = {"cifar10": 50000, "fashion_mnist": 60000}


def errors(flags):
    """Every problem the flags have that plain Python can see."""
    found = []

    def refuse_unless(ok, flag, got=None):
        if not ok:
            value = getattr(flags, flag) if got is None else got
            found.append(f"--{flag} must be {ALLOWED[flag]}, got {value}")

    def number(flag, low, low_ok=True, high=None, finite=True):
        value = getattr(flags, flag)
        if value is None:
            return
        ok = (value >= low if low_ok else value > low) and (high is None or value < high)
        refuse_unless(ok and (math.isfinite(value) or not finite), flag)

    for flag in ("sparsity_multiplier", "pull_sparsity_multiplier"):
        number(flag, 1.0, high=2.0)
    pull_name, _ = pull_settings(flags)
    if flags.pull_sparsity_multiplier is not None and pull_name != "3lc":
        found.append("--pull_sparsity_multiplier needs a 3lc model pull (--compressor=3lc or "
                     f"--pull_compressor=3lc), got {pull_name}")
    # Checked whatever --scaling is: a bad value is a mistake either way.
    refuse_unless(flags.block_size > 0 and flags.block_size % 5 == 0, "block_size")
    for flag in ("compressor", "pull_compressor"):
        name = getattr(flags, flag)
        if name is not None and name not in COMPRESSOR_NAMES:
            found.append(f"--{flag}={name} is not a known compressor "
                         f"(one of {', '.join(COMPRESSOR_NAMES)})")
    try:
        parse_compressor_args(flags.compressor_args)
    except ValueError as e:
        found.append(str(e))
    if flags.backup_workers < 0 or flags.backup_workers >= flags.num_workers:
        found.append(f"--backup_workers must be in [0, num_workers={flags.num_workers}), "
                     f"got {flags.backup_workers}")
    found += _netem_errors(flags)
    if flags.sync == "tf" and (flags.compressor != "float32" or flags.pull_compressor):
        found.append(f"--sync=tf is TensorFlow's own optimizer, which sends float32: it needs "
                     f"--compressor=float32 and no --pull_compressor, got --compressor="
                     f"{flags.compressor}")
    number("push_budget", 0.0, low_ok=False)
    if flags.compressor == "3lc_auto" and flags.push_budget is None:
        found.append("--compressor=3lc_auto needs --push_budget (seconds a push may take)")
    for flag in AT_LEAST_ONE:
        refuse_unless(getattr(flags, flag) >= 1, flag)
    refuse_unless(1 <= flags.push_buckets <= MAX_PUSH_BUCKETS, "push_buckets")
    for flag in ("eval_every", "checkpoint_steps", "compress_threshold", "task_index",
                 "trace_steps"):
        refuse_unless(getattr(flags, flag) >= 0, flag)
    for flag in ("learning_rate", "unreachable_timeout", "stall_timeout", "timeout"):
        number(flag, 0.0, low_ok=False)
    for flag in ("weight_decay", "checkpoint_secs"):
        number(flag, 0.0)
    number("momentum", 0.0, high=1.0)
    refuse_unless(0 <= flags.seed <= MAX_SEED, "seed")
    if flags.dataset in TRAIN_EXAMPLES and flags.batch_size > TRAIN_EXAMPLES[flags.dataset]:
        found.append(f"--batch_size must be an integer in [1, {TRAIN_EXAMPLES[flags.dataset]}] "
                     f"({flags.dataset}'s training examples), got {flags.batch_size}")
    if flags.model is not None and flags.model not in MODELS:
        refuse_unless(False, "model")
    refuse_unless(flags.dataset in DATASETS, "dataset")
    refuse_unless(flags.optimizer in OPTIMIZERS, "optimizer")
    if flags.job_name is not None:
        refuse_unless(flags.job_name in ("ps", "worker"), "job_name")
        if not flags.cluster and not os.environ.get("TF_CONFIG"):
            found.append("--job_name needs --cluster (or TF_CONFIG) to say where the task stands")
    return found


def _netem_errors(flags):
    """The testbed's rate, delay and rate changes, parsed as the launcher will."""
    from testbed import netem  # pylint: disable=import-outside-toplevel
    found = []
    for flag, parse in (("netem_rate", netem.parse_rate), ("netem_delay", netem.parse_delay)):
        value = getattr(flags, flag)
        if value is None:
            continue
        try:
            parse(value)
        except ValueError:
            found.append(f"--{flag} must be {ALLOWED[flag]}, got {value}")
    if flags.netem_rate_changes:
        try:
            netem.parse_rate_changes(flags.netem_rate_changes)
        except ValueError as e:
            found.append(f"--netem_rate_changes: {e}")
    for flag in ("netem_rate_changes", "netem_delay"):
        if getattr(flags, flag) and not flags.netem_rate:
            found.append(f"--{flag} needs --netem_rate")
    return found


def pull_settings(flags):
    """The model pull's compressor name and 3LC s: the push's unless
    --pull_compressor / --pull_sparsity_multiplier say otherwise (the one
    place these defaults are written)."""
    name = flags.pull_compressor or flags.compressor
    s = flags.pull_sparsity_multiplier
    return name, flags.sparsity_multiplier if s is None else s


def compressor_from_flags(name, flags, sparsity_multiplier):
    """Builds the compressor a flag names, with its flag-given parameters
    (3LC's s: `sparsity_multiplier`). Imports TensorFlow (through tlc.compressors)."""
    from tlc import compressors  # pylint: disable=import-outside-toplevel
    kwargs = parse_compressor_args(flags.compressor_args)
    if name in ("3lc", "3lc_auto"):
        kwargs.setdefault("sparsity_multiplier", sparsity_multiplier)
        kwargs.setdefault("adaptive", flags.adaptive)
        kwargs.setdefault("scaling", flags.scaling)
        kwargs.setdefault("block_size", flags.block_size)
    try:
        return compressors.create(name, **kwargs)
    except TypeError as e:
        raise ValueError(f"--compressor_args do not fit compressor {name!r}: {e}") from e


def pull_compressor_from_flags(flags):
    """The model pull's compressor, or None for the push's. With
    --pull_sparsity_multiplier the pull is its own 3LC instance at that s."""
    if flags.pull_compressor is None and flags.pull_sparsity_multiplier is None:
        return None
    name, s = pull_settings(flags)
    return compressor_from_flags(name, flags, s)


def compressor_errors(flags):
    """Builds the named compressors with their --compressor_args (imports TensorFlow)."""
    found = []
    pull_s = pull_settings(flags)[1]
    for flag, s in (("compressor", flags.sparsity_multiplier), ("pull_compressor", pull_s)):
        name = getattr(flags, flag)
        if name is not None:
            try:
                compressor_from_flags(name, flags, s)
            except ValueError as e:
                found.append(f"--{flag}={name}: {e}")
    return found


def parse_error(error):
    """absl's parse error as one problem naming the flag."""
    from absl import flags as absl_flags  # pylint: disable=import-outside-toplevel
    if isinstance(error, absl_flags.UnrecognizedFlagError):
        return f"--{error.flagname} is not a flag of tlc.train"
    return str(error)


def refuse(problems):
    """One line on stderr saying what is wrong, then exit code 2."""
    print(f"tlc.train: {'; '.join(problems)} ({HINT})", file=sys.stderr, flush=True)
    sys.exit(2)


def main(argv):
    """Parses argv[1:] with the main job's flags; refuses bad ones, else says nothing."""
    from absl import flags as absl_flags  # pylint: disable=import-outside-toplevel
    from tlc.job import flags as job_flags  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    if any(arg.split("=")[0] in HELP_FLAGS for arg in argv[1:]):
        return 0  # the main job prints the help
    try:
        absl_flags.FLAGS(["tlc.train", *argv[1:]])
    except absl_flags.Error as e:
        refuse([parse_error(e)])
    problems = errors(absl_flags.FLAGS)
    if problems:
        refuse(problems)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
