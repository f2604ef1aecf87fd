"""Every flag of the main job (`python -m tlc.train`), defined once.

Importing this module defines them on absl's FLAGS and imports nothing else
of tlc, so the job's modules import it (and flagcheck) one way: main ->
flagcheck -> flags, task -> flagcheck. The allowed values of each flag are
checked in tlc/job/flagcheck.py.
"""
from absl import flags

FLAGS = flags.FLAGS

# Cluster.
flags.DEFINE_string("cluster", None, "Cluster JSON (text or file); default: TF_CONFIG, else a "
                    "local cluster launched by this process.")
flags.DEFINE_string("job_name", None, "ps or worker (with --cluster); without it, all tasks of "
                    "--cluster are launched on this machine.")
flags.DEFINE_integer("task_index", 0, "Task index within the job (with --cluster).")
flags.DEFINE_integer("num_ps", 1, "Parameter servers of the embedded local cluster.")
flags.DEFINE_integer("num_workers", 2, "Workers of the embedded local cluster.")
flags.DEFINE_integer("backup_workers", 0, "Workers whose gradients are not waited for.")
flags.DEFINE_string("netem_rate", None, "Run the local cluster in network namespaces with this "
                    "rate limit per task and direction (e.g. 10mbit, or unlimited); needs root.")
flags.DEFINE_string("netem_rate_changes", None, "With --netem_rate: change every link's rate "
                    "during the run, e.g. '60:10mbit,120:100mbit' (seconds after launch:rate) or "
                    "'@300:10mbit' (when the chief reaches step 300).")
flags.DEFINE_string("netem_delay", None, "Extra one-way delay with --netem_rate (e.g. 1ms).")
# Model and data.
flags.DEFINE_string("dataset", "fashion_mnist", "fashion_mnist or cifar10.")
flags.DEFINE_string("data_dir", None, "Dataset directory (default: the dataset's usual place).")
flags.DEFINE_string("model", None, "small_cnn, mlp, resnet20, resnet32, resnet110 (default: the "
                    "dataset's default model).")
flags.DEFINE_integer("batch_size", 64, "Per-worker batch size.")
flags.DEFINE_integer("steps", 600, "Global steps to train.")
flags.DEFINE_string("optimizer", "momentum", "sgd, momentum or adam.")
flags.DEFINE_float("learning_rate", 0.05, "Learning rate.")
flags.DEFINE_float("momentum", 0.9, "Momentum (momentum optimizer).")
flags.DEFINE_float("weight_decay", 0.0, "L2 weight decay on conv and dense kernels (He et al. "
                   "use 1e-4 on CIFAR).")
# Compression.
flags.DEFINE_enum("sync", "tlc", ["tlc", "tf"], "tlc: tlc.SyncReplicasOptimizer (compressed "
                  "pushes and pulls, local model copies); tf: TensorFlow's own "
                  "SyncReplicasOptimizer, float32 both ways (the baseline; needs "
                  "--compressor=float32).")
flags.DEFINE_string("compressor", "3lc", "Registered compressor name (tlc.compressors.names()).")
flags.DEFINE_float("sparsity_multiplier", 1.0, "3LC sparsity multiplier s in [1, 2).")
flags.DEFINE_bool("adaptive", True, "3LC: pick the smaller of zero-run and Golomb encodings.")
flags.DEFINE_enum("scaling", "block", ["tensor", "block"], "3LC: one scale m per block of "
                  "--block_size values (docs/FORMAT.md 1.1) or one per tensor (the paper's; "
                  "large tensors stop training at s >= 1.75).")
flags.DEFINE_integer("block_size", 1000, "3LC with --scaling=block: values per scale (a "
                     "positive multiple of 5).")
flags.DEFINE_string("compressor_args", "", "Compressor parameters, e.g. p=0.01,delay=2 for sbc.")
flags.DEFINE_float("push_budget", None, "3lc_auto: seconds a step's push may take (s follows "
                   "the measured link rate); aqgb_auto: time the last layer's push may take.")
flags.DEFINE_string("pull_compressor", None, "Compressor for model pulls (default: as push).")
flags.DEFINE_float("pull_sparsity_multiplier", None, "3LC sparsity multiplier of the model pull "
                   "in [1, 2) (default: --sparsity_multiplier). Needs a 3lc pull compressor.")
flags.DEFINE_integer("compress_threshold", 1024, "Tensors with fewer elements go uncompressed.")
flags.DEFINE_enum("statistics", "ps", ["worker", "ps"], "Batch-norm moving statistics "
                  "with --sync=tlc. ps: on the PS, updated by every worker's step as TF's "
                  "SyncReplicasOptimizer does (TF's evaluated model; the batch statistics cross "
                  "as one tensor per PS per worker step). worker: each worker keeps its own, "
                  "the chief's are saved and evaluated (the 3LC paper's; they follow the "
                  "chief's batches alone).")
flags.DEFINE_integer("push_buckets", 3, "Push messages per PS at most, last layers first, each "
                     "sent once its gradients are in (1: one message after backprop, no overlap).")
# Output.
flags.DEFINE_string("logdir", None, "Run directory: task logs, TensorBoard, checkpoints, "
                    "summary.json (default: runs/<time>).")
flags.DEFINE_integer("trace_steps", 0, "Trace this many steps of each worker after a short "
                     "warm-up: a Chrome trace per worker and step and timeline.png in the run "
                     "directory, wire time under compute in the summary (0: off).")
flags.DEFINE_integer("log_every", 50, "Print progress every this many steps.")
flags.DEFINE_integer("checkpoint_steps", 0, "Chief also saves a checkpoint every this many "
                     "steps (0: not by steps). It always saves at the start and the end.")
flags.DEFINE_float("checkpoint_secs", 600, "Chief also saves a checkpoint every this many "
                   "seconds (0: not by time).")
flags.DEFINE_float("unreachable_timeout", 600, "A worker gives up (exit 1) when a parameter "
                   "server has been unreachable this many seconds.")
flags.DEFINE_float("stall_timeout", 60, "A worker names on the console a parameter server "
                   "that has not answered a probe (or whose step has not moved while this worker "
                   "waits) for this many seconds, and again at growing intervals.")
flags.DEFINE_integer("eval_batch", 1000, "Evaluation batch size.")
flags.DEFINE_integer("eval_every", 0, "Chief: test accuracy on --eval_examples every this many "
                     "steps (0: only at the end), for time-to-accuracy curves.")
flags.DEFINE_integer("eval_examples", 2000, "Test examples for the periodic evaluation.")
flags.DEFINE_integer("seed", 1, "Random seed.")
flags.DEFINE_float("timeout", 3600, "Launcher: stop the cluster after this many seconds.")

