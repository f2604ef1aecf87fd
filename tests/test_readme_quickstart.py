"""README's quick start runs as pasted: its code block, taken verbatim from
README.md, as a real 1 PS + 2 worker job on loopback (one process per task).
A harness only defines the names the block asks the user for (cluster,
job_name, index, steps, my_model, next_batch) and then executes the block's
text. Every process must exit with 0, and each worker's TrafficHook must
report the global step reaching the last step, with compressed traffic."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

from tlc.job.cluster import free_ports

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 20

# The user's part: a two-layer perceptron on Fashion-MNIST; then the block.
HARNESS = """
import gzip, json, sys
import numpy as np
import tensorflow as tf

cluster = json.loads(sys.argv[1])
job_name, index, steps = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
quick_start = open(sys.argv[5]).read()
data_dir = "/usr/share/datasets/fashion-mnist"


def my_model():
    images = tf.compat.v1.placeholder(tf.float32, [None, 784])
    labels = tf.compat.v1.placeholder(tf.int64, [None])
    w1 = tf.Variable(tf.random.normal([784, 128], stddev=0.05), name="w1")
    b1 = tf.Variable(tf.zeros([128]), name="b1")
    w2 = tf.Variable(tf.random.normal([128, 10], stddev=0.05), name="w2")
    logits = tf.matmul(tf.nn.relu(tf.matmul(images, w1) + b1), w2)
    return (images, labels), tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


with gzip.open(data_dir + "/train-images-idx3-ubyte.gz") as f:
    x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784) / np.float32(255)
with gzip.open(data_dir + "/train-labels-idx1-ubyte.gz") as f:
    y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
rng = np.random.default_rng(index)


def next_batch():
    batch = rng.integers(0, len(x), 64)
    return x[batch], y[batch]


exec(compile(quick_start, "README.md quick start", "exec"))
"""


def quick_start_code():
    """The python blocks of README's "Quick start" section, verbatim."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    section = re.search(r"^## Quick start.*?(?=^## )", readme, re.S | re.M)
    assert section, "README.md has no '## Quick start' section"
    blocks = re.findall(r"^```python\n(.*?)^```", section.group(0), re.S | re.M)
    assert blocks, "README.md's quick start has no python block"
    return "\n".join(blocks)


def test_quick_start_block_is_complete_python():
    code = quick_start_code()
    compile(code, "README.md quick start", "exec")
    # The imports are in the block itself: a pasted block needs nothing else.
    assert "import tlc.ops" in code and "from tlc.traffic import TrafficHook" in code


def test_readme_quick_start_trains_as_pasted(tmp_path):
    snippet = tmp_path / "quick_start.py"
    snippet.write_text(quick_start_code())
    ports = free_ports(3)
    cluster = {"ps": [f"127.0.0.1:{ports[0]}"],
               "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
    tasks = [("ps", 0), ("worker", 0), ("worker", 1)]
    logs = {task: tmp_path / f"{task[0]}{task[1]}.log" for task in tasks}
    procs = {}
    for job, index in tasks:
        with open(logs[(job, index)], "w") as log:  # files, not pipes: nothing blocks on output
            procs[(job, index)] = subprocess.Popen(
                [sys.executable, "-c", HARNESS, json.dumps(cluster), job, str(index),
                 str(STEPS), str(snippet)],
                cwd=str(tmp_path), stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"})
    deadline = time.time() + 900  # generous: the machine is shared; a hang fails here
    for task, proc in procs.items():
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            pass
    stuck = [task for task, proc in procs.items() if proc.poll() is None]
    for task in stuck:
        procs[task].kill()
        procs[task].wait()
    output = {task: logs[task].read_text() for task in tasks}
    assert not stuck, f"still running: {stuck}\n" + "\n".join(
        f"{t}: {output[t][-2000:]}" for t in stuck)
    for task, proc in procs.items():
        assert proc.returncode == 0, f"{task}: exit {proc.returncode}\n{output[task][-3000:]}"
    for index in range(2):
        # TrafficHook's last line: the global step at the end and the ratio.
        lines = re.findall(r"tlc traffic: step (\d+): .*?; ([\d.]+)x fewer than float32",
                           output[("worker", index)])
        assert lines, output[("worker", index)][-3000:]
        step, ratio = int(lines[-1][0]), float(lines[-1][1])
        print(f"worker {index}: global step {step}, {ratio}x fewer bytes than float32")
        assert step >= STEPS, output[("worker", index)][-3000:]
        assert ratio > 10, lines  # 3LC at these s sends far under a tenth of float32
