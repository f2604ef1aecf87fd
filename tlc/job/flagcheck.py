"""Flag checks that need no TensorFlow, so a bad value is refused in a second.

scripts/train.sh runs `python -m tlc.job.flagcheck FLAGS...` before set-up;
the main job runs the same checks before it imports TensorFlow. Only the
check that builds the compressor (its --compressor_args) needs TensorFlow.
A refusal is one line on stderr and exit code 2, never absl's usage text.
"""
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


def errors(flags):
    """Every problem the flags have that plain Python can see."""
    found = []
    if not 1.0 <= flags.sparsity_multiplier < 2.0:
        found.append(f"--sparsity_multiplier must be in [1, 2), got {flags.sparsity_multiplier}")
    pull_s = flags.pull_sparsity_multiplier
    if pull_s is not None:
        if not 1.0 <= pull_s < 2.0:
            found.append(f"--pull_sparsity_multiplier must be in [1, 2), got {pull_s}")
        if (flags.pull_compressor or flags.compressor) != "3lc":
            found.append("--pull_sparsity_multiplier needs a 3lc model pull (--compressor=3lc or "
                         f"--pull_compressor=3lc), got {flags.pull_compressor or flags.compressor}")
    if flags.scaling == "block" and not (flags.block_size > 0 and flags.block_size % 5 == 0):
        found.append(f"--block_size must be a positive multiple of 5, got {flags.block_size}")
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
    if flags.netem_rate_changes:
        from tlc.job import launcher  # pylint: disable=import-outside-toplevel
        try:
            launcher.parse_rate_changes(flags.netem_rate_changes)
        except ValueError as e:
            found.append(f"--netem_rate_changes: {e}")
        if not flags.netem_rate:
            found.append("--netem_rate_changes needs --netem_rate")
    if flags.sync == "tf" and (flags.compressor != "float32" or flags.pull_compressor):
        found.append(f"--sync=tf is TensorFlow's own optimizer, which sends float32: it needs "
                     f"--compressor=float32 and no --pull_compressor, got --compressor="
                     f"{flags.compressor}")
    if flags.push_budget is not None and not flags.push_budget > 0:
        found.append(f"--push_budget must be > 0 seconds, got {flags.push_budget}")
    if flags.compressor == "3lc_auto" and flags.push_budget is None:
        found.append("--compressor=3lc_auto needs --push_budget (seconds a push may take)")
    if flags.eval_every < 0:
        found.append(f"--eval_every must be >= 0, got {flags.eval_every}")
    for flag in AT_LEAST_ONE:
        if getattr(flags, flag) < 1:
            found.append(f"--{flag} must be >= 1, got {getattr(flags, flag)}")
    if flags.learning_rate <= 0:
        found.append(f"--learning_rate must be > 0, got {flags.learning_rate}")
    if flags.model is not None and flags.model not in MODELS:
        found.append(f"--model must be one of {', '.join(MODELS)}, got {flags.model}")
    if flags.dataset not in DATASETS:
        found.append(f"--dataset must be one of {', '.join(DATASETS)}, got {flags.dataset}")
    if flags.optimizer not in OPTIMIZERS:
        found.append(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {flags.optimizer}")
    return found


def compressor_from_flags(name, flags, sparsity_multiplier=None):
    """Builds the compressor a flag names, with its flag-given parameters
    (3LC's s: `sparsity_multiplier` if given, else --sparsity_multiplier).
    Imports TensorFlow (through tlc.compressors)."""
    from tlc import compressors  # pylint: disable=import-outside-toplevel
    kwargs = parse_compressor_args(flags.compressor_args)
    if name in ("3lc", "3lc_auto"):
        kwargs.setdefault("sparsity_multiplier", sparsity_multiplier or flags.sparsity_multiplier)
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
    name = flags.pull_compressor
    if name is None and flags.pull_sparsity_multiplier is None:
        return None
    return compressor_from_flags(name or flags.compressor, flags, flags.pull_sparsity_multiplier)


def compressor_errors(flags):
    """Builds the named compressors with their --compressor_args (imports TensorFlow)."""
    found = []
    for flag in ("compressor", "pull_compressor"):
        name = getattr(flags, flag)
        if name is not None:
            try:
                compressor_from_flags(name, flags)
            except ValueError as e:
                found.append(f"--{flag}={name}: {e}")
    return found


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
        refuse([str(e)])
    problems = errors(absl_flags.FLAGS)
    if problems:
        refuse(problems)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
