"""Faults that must say what happened, with real processes: checkpoints, a
full or read-only disk, a lost backup worker under the launcher, an
unreachable PS, a port in use, a bad cluster file, a corrupt dataset."""
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys

import pytest
import tensorflow as tf

from test_faults import BASE_FLAGS, ROOT, chief_step, wait_for
from tlc.job import cluster as cl
from tlc.job import launcher
from tlc import session

pytestmark = pytest.mark.cluster

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root)")


def train(logdir, *flags, timeout=900):
    """python -m tlc.train (the launcher) to the end: (exit code, stdout + stderr)."""
    proc = subprocess.run([sys.executable, "-m", "tlc.train", *BASE_FLAGS, *flags,
                           f"--logdir={logdir}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def task(spec, job, index, *flags, timeout=300):
    proc = subprocess.run([sys.executable, "-m", "tlc.train", *BASE_FLAGS,
                           f"--cluster={json.dumps(spec)}", f"--job_name={job}",
                           f"--task_index={index}", *flags], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def latest_checkpoint(checkpoints):
    path = tf.train.latest_checkpoint(str(checkpoints))
    assert path, os.listdir(checkpoints)
    for suffix in (".index", ".meta"):
        assert os.path.exists(path + suffix), f"latest checkpoint {path} lacks {suffix}"
    # Every data shard of the sharded saver (as TF's Scaffold saves): none
    # missing, and one per parameter server as for a stock TF job (1 PS here;
    # tlc's shadows once made a second group on the same PS).
    shards = [n for n in os.listdir(checkpoints)
              if n.startswith(os.path.basename(path) + ".data-")]
    assert shards, f"latest checkpoint {path} has no data file"
    count = int(shards[0].rsplit("-of-", 1)[1])
    expected = {f"{os.path.basename(path)}.data-{i:05d}-of-{count:05d}" for i in range(count)}
    assert set(shards) == expected, (sorted(shards), sorted(expected))
    assert count == 1, sorted(shards)
    return path, int(path.rsplit("-", 1)[1])


@contextlib.contextmanager
def tmpfs(where, size, *options):
    os.makedirs(where, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join((f"size={size}",) + options),
                    "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_checkpoints_at_start_end_and_by_time(tmp_path):
    # 30 steps outlast 0.2 s on any machine (each makes RPCs to the PS and
    # waits for a round); 60 made ~60 saves of ~30 MB on a busy machine.
    code, out = train(tmp_path / "run", "--steps=30", "--checkpoint_secs=0.2")
    assert code == 0, out[-3000:]
    _, step = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert step == 30  # the end is always saved
    state = tf.train.get_checkpoint_state(str(tmp_path / "run" / "checkpoints"))
    steps = {int(p.rsplit("-", 1)[1]) for p in state.all_model_checkpoint_paths}
    assert len(steps) >= 3, steps  # start, end, and at least one by time in between
    # The default (--checkpoint_steps=0, --checkpoint_secs=600) saves the end too.
    code, out = train(tmp_path / "default", "--steps=10")
    assert code == 0, out[-3000:]
    assert latest_checkpoint(tmp_path / "default" / "checkpoints")[1] == 10


@needs_root
def test_full_disk_keeps_the_last_complete_checkpoint_and_resumes(tmp_path):
    # A checkpoint of this model is ~19.3 MiB (model, momentum, shadows),
    # and each worker's push-memory shard beside it 6.4 MB: 80 MiB holds two
    # checkpoints with their shards, not a third.
    with tmpfs(tmp_path / "disk", "80m") as disk:
        logdir = disk / "run"
        code, out = train(logdir, "--steps=60", "--checkpoint_steps=10", "--checkpoint_secs=0")
        assert code != 0
        assert "Traceback" not in out, out[-3000:]
        failure = [line for line in out.splitlines() if "cannot write checkpoint" in line]
        assert failure and "No space left on device" in failure[0], out[-3000:]
        assert "OOM" not in failure[0] and "Hint" not in failure[0]
        assert "failed tasks: worker0 (exit 1)" in out
        path, saved = latest_checkpoint(logdir / "checkpoints")
        assert saved >= 10, path
        assert f"latest complete checkpoint: {path}" in failure[0]
        # With room again, the same command resumes from that checkpoint.
        subprocess.run(["mount", "-o", "remount,size=400m", str(disk)], check=True)
        code, out = train(logdir, "--steps=60", "--checkpoint_steps=10", "--checkpoint_secs=0")
        assert code == 0, out[-3000:]
        with open(logdir / "worker0.json", encoding="utf-8") as f:
            chief = json.load(f)
        assert chief["first_step"] == saved and chief["global_step"] == 60


@needs_root
def test_read_only_logdir_is_one_line(tmp_path):
    with tmpfs(tmp_path / "ro", "1m", "ro") as ro:
        code, out = train(ro / "run", "--steps=5", timeout=300)
    assert code != 0
    assert f"tlc: cannot write to --logdir={ro}/run: Read-only file system" in out
    assert "Traceback" not in out


@needs_root
def test_summary_survives_empty_and_unwritable_files(tmp_path, capsys):
    spec = cl.local_cluster(1, 2)
    with tmpfs(tmp_path / "disk", "1m") as disk:
        (disk / "worker0.json").write_text(json.dumps({
            "task": 0, "bytes_pushed": 10, "bytes_pulled": 20, "worker_steps": 1,
            "float32_bytes_per_step": 40, "work_done_time": 0.0}))
        (disk / "worker1.json").write_bytes(b"")  # cut short by a full disk
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        codes = {("ps", 0): 0, ("worker", 0): 0, ("worker", 1): 0}
        summary = launcher.summarize(str(disk), spec, codes, 1.0)
    assert not summary["ok"]
    assert "worker1" in summary["unreadable_reports"]
    assert summary["bytes_pushed"] == 10
    assert "cannot write" in capsys.readouterr().err


def test_summary_survives_a_report_without_counters(tmp_path):
    # A worker whose session ended early used to leave {"task", "model",
    # "compressor"} only, and summarize died on a KeyError.
    spec = cl.local_cluster(1, 2)
    (tmp_path / "worker0.json").write_text(json.dumps({
        "task": 0, "bytes_pushed": 10, "bytes_pulled": 20, "worker_steps": 1,
        "float32_bytes_per_step": 40, "work_done_time": 0.0}))
    (tmp_path / "worker1.json").write_text(json.dumps({"task": 1, "model": "small_cnn"}))
    codes = {("ps", 0): 0, ("worker", 0): 1, ("worker", 1): 0}
    summary = launcher.summarize(str(tmp_path), spec, codes, 1.0, exit_times={"w": 1.0})
    assert not summary["ok"]
    assert summary["unreadable_reports"] == {"worker1": "incomplete report"}
    assert summary["bytes_pushed"] == 10 and summary["worker_steps"] == 1


def test_launcher_goes_on_without_a_lost_backup_worker(tmp_path):
    logdir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "tlc.train", *BASE_FLAGS, "--steps=50",
                             "--num_workers=3", "--backup_workers=1", f"--logdir={logdir}"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: chief_step(str(logdir)) >= 10, 600, "training to start")
        pids = subprocess.run(["pgrep", "-f", "--", f"--task_index=2 --logdir={logdir}"],
                              capture_output=True, text=True).stdout.split()
        assert len(pids) == 1, pids
        os.kill(int(pids[0]), signal.SIGKILL)
        out, _ = proc.communicate(timeout=900)
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-3000:]
    assert "worker2 ended with exit code -9; training went on without it" in out
    with open(logdir / "summary.json", encoding="utf-8") as f:
        summary = json.load(f)
    assert summary["ok"] and summary["failed_tasks"] == {}
    assert summary["global_step"] == 50


def test_worker_says_it_waits_for_an_unreachable_ps_and_gives_up(tmp_path):
    ps, worker = cl.free_ports(2)
    spec = {"ps": [f"127.0.0.1:{ps}"], "worker": [f"127.0.0.1:{worker}"]}
    code, out = task(spec, "worker", 0, "--unreachable_timeout=25", f"--logdir={tmp_path}")
    assert code != 0
    assert f"worker 0: waiting for ps0 at 127.0.0.1:{ps} for 10 s" in out
    assert f"worker 0: waiting for ps0 at 127.0.0.1:{ps} for 20 s" in out
    assert re.search(rf"worker 0: giving up: ps0 at 127.0.0.1:{ps} has been unreachable for "
                     r"\d+ s \(--unreachable_timeout=25\)", out), out[-2000:]


def test_port_in_use_is_named(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        spec = {"ps": [f"127.0.0.1:{port}"], "worker": [f"127.0.0.1:{cl.free_ports(1)[0]}"]}
        code, out = task(spec, "ps", 0, f"--logdir={tmp_path}")
    assert code != 0
    assert f"ps 0: cannot serve 127.0.0.1:{port}: address already in use" in out, out[-2000:]


def test_cluster_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "cluster.json"
    path.write_bytes(b'{"ps": ["127.0.0.1:1"], "worker": ["caf\xe9:2"]}')
    proc = subprocess.run([sys.executable, "-m", "tlc.train", f"--cluster={path}",
                           "--job_name=ps", f"--logdir={tmp_path}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert f"tlc: cluster file {path} is not UTF-8 text" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_corrupt_dataset_is_found_before_any_task_starts(tmp_path):
    source = "/usr/share/datasets/fashion-mnist"
    if not os.path.isdir(source):
        pytest.skip("Debian package dataset-fashion-mnist not installed")
    copy = tmp_path / "data"
    shutil.copytree(source, copy)
    images = copy / "train-images-idx3-ubyte.gz"
    body = bytearray(images.read_bytes())
    body[-8] ^= 0xFF  # the gzip trailer's CRC: headers and sizes still look fine
    images.write_bytes(bytes(body))
    code, out = train(tmp_path / "run", f"--data_dir={copy}", "--steps=5", timeout=300)
    assert code != 0
    assert "train-images-idx3-ubyte.gz: corrupt gzip data" in out, out[-2000:]
    assert "Traceback" not in out
    assert not (tmp_path / "run" / "worker0.log").exists()  # no task was started


def test_checkpoint_error_cause_found_under_a_ruler():
    # One CI run's TF error put a ruler first; the line said "=====...".
    message = ("Graph execution error:\n\n=====================\nDetected at node save/x\n"
               "Failed to write /d/model.ckpt-20_temp/part-0.data: No space left on device\n"
               "\t [[{{node save/SaveV2}}]]\n")
    assert session._first_cause(message) == "No space left on device"  # pylint: disable=protected-access
    assert session._first_cause("==\nsomething odd; really odd\n") == "really odd"  # pylint: disable=protected-access
