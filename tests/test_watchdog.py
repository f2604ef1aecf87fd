"""A stopped or failing run says why, in lines a person reads (issue 22 point 3):
a frozen PS named within --stall_timeout, `--timeout` and signals named by the
launcher, a non-finite gradient in one line with variable, step and worker,
and TensorFlow's log lines kept off the console (they stay in the task logs).
The runs are real `python -m tlc.train` launchers; every wait is on a line or
a process, with generous limits."""
import json
import os
import re
import signal
import subprocess
import sys
import threading

import pytest
import tensorflow as tf

from test_faults import BASE_FLAGS, ROOT, chief_step, wait_for
from tlc.job import cluster as cl
from tlc import watchdog
from tlc.job import launcher, task

pytestmark = pytest.mark.cluster

# TF's log lines as tasks write them (absl's format from C++ and Python, and
# the Python logger's own), each followed by the lines that continue it.
TF_LINE = re.compile(r"^([IWE]\d{4} \d\d:\d\d:[\d.]+\s+\d+ \S+:\d+\]|(INFO|WARNING|ERROR):"
                     r"tensorflow:)", re.M)


class Run:
    """python -m tlc.train (the launcher) in the background; its output as it comes."""

    def __init__(self, logdir, *flags):
        self.logdir = str(logdir)
        self.proc = subprocess.Popen([sys.executable, "-m", "tlc.train", *BASE_FLAGS, *flags,
                                      f"--logdir={self.logdir}"], cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out, self.err = [], []
        self._readers = [threading.Thread(target=self._read, args=(stream, lines), daemon=True)
                         for stream, lines in ((self.proc.stdout, self.out),
                                               (self.proc.stderr, self.err))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, lines):
        for line in stream:
            lines.append(line.rstrip("\n"))

    def lines(self, since=0):
        return self.out[since:]

    def finish(self, timeout=300):
        code = self.proc.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=30)
        return code

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.finish()

    def task_pid(self, job, index):
        pids = subprocess.run(["pgrep", "-f", "--", f"--job_name={job} --task_index={index} "
                               f"--logdir={self.logdir}"], capture_output=True,
                              text=True).stdout.split()
        assert len(pids) == 1, pids
        return int(pids[0])

    def summary(self):
        with open(os.path.join(self.logdir, "summary.json"), encoding="utf-8") as f:
            return json.load(f)


def test_a_frozen_ps_is_named_and_training_goes_on_when_it_thaws(tmp_path):
    run = Run(tmp_path / "run", "--steps=100000", "--stall_timeout=5", "--log_every=1")
    try:
        wait_for(lambda: chief_step(run.logdir) >= 5, 600, "training to start")
        ps = run.task_pid("ps", 0)
        frozen_at = len(run.out)
        os.kill(ps, signal.SIGSTOP)
        named = re.compile(r"worker 0: ps0 at 127\.0\.0\.1:\d+ has not answered for 5 s \(it "
                           r"accepts connections: stopped or stuck\?; --stall_timeout=5\)$")
        try:
            wait_for(lambda: any(named.match(line) for line in run.lines(frozen_at)), 120,
                     "the frozen PS named on the console; it says:\n" + "\n".join(run.out[-20:]))
        finally:
            os.kill(ps, signal.SIGCONT)
        thawed_at, step = len(run.out), chief_step(run.logdir)
        wait_for(lambda: any(re.match(r"worker 0: ps0 at \S+ answers again$", line)
                             for line in run.lines(thawed_at)), 120, "the PS answering again")
        wait_for(lambda: chief_step(run.logdir) >= step + 5, 300, "training going on")
        # Ctrl-C: the launcher says what stopped the run.
        run.proc.send_signal(signal.SIGINT)
        code = run.finish()
    finally:
        run.kill()
    assert code == 128 + signal.SIGINT
    assert re.search(r"^tlc: stopped by SIGINT at step \d+ of 100000: every task stopped; "
                     f"see their logs in {re.escape(run.logdir)}$", "\n".join(run.err), re.M), \
        run.err
    console = "\n".join(run.out + run.err)
    assert not TF_LINE.search(console), console[-3000:]
    assert "Traceback" not in console


def test_sigterm_to_the_launcher_is_named(tmp_path):
    run = Run(tmp_path / "run", "--steps=100000")
    try:
        # The task logs appear once the launcher handles signals.
        wait_for(lambda: os.path.exists(os.path.join(run.logdir, "worker0.log")), 300,
                 "the tasks to start")
        run.proc.send_signal(signal.SIGTERM)
        code = run.finish()
    finally:
        run.kill()
    assert code == 128 + signal.SIGTERM
    assert any(re.match(r"tlc: stopped by SIGTERM at step \d+ of 100000: every task stopped",
                        line) for line in run.err), run.err
    assert not subprocess.run(["pgrep", "-f", "--", f"--logdir={run.logdir}"],
                              capture_output=True, text=True).stdout.split()


def test_a_signal_while_a_task_is_being_started_leaves_no_task_behind(tmp_path, monkeypatch):
    # The race the test above once lost: SIGTERM after a task's fork, before
    # Popen returned, raised there and left that task running, unknown.
    started, real_popen = [], subprocess.Popen

    def popen(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        started.append(proc)
        if len(started) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # handled before this Popen returns
        return proc

    monkeypatch.setattr(cl.subprocess, "Popen", popen)
    spec = {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]}
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    launcher = cl.TaskProcesses(spec, lambda job, index: sleeper, str(tmp_path), echo_chief=False)
    try:
        with pytest.raises(SystemExit) as stopped:
            with launcher:
                pass
        assert stopped.value.code == 128 + signal.SIGTERM
        assert [proc.poll() is not None for proc in started] == [True] * len(started)
    finally:
        for proc in started:
            proc.kill()
            proc.wait()


def test_a_signal_inside_a_tasks_poll_stops_every_task(tmp_path):
    # A signal lands between two bytecodes of the main thread, so it can land
    # inside Popen.poll() while that holds the Popen's lock (the wait loop
    # polls every task ten times a second). The handler used to stop the
    # tasks right there, and waiting for that task then blocked on the lock
    # its own thread held: Ctrl-C hung the launcher (seen once in CI).
    spec = {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}
    marker = f"sleeper-{tmp_path.name}"  # names this test's tasks alone, for the cleanup
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)", marker]
    script = f"""
import signal, sys
from tlc.job import cluster as cl
tasks = cl.TaskProcesses({spec!r}, lambda job, index: {sleeper!r}, {str(tmp_path)!r},
                         echo_chief=False)
try:
    with tasks:
        proc = tasks.procs[("worker", 0)]
        with proc._waitpid_lock:  # as Popen.poll() holds it
            tasks._on_signal(signal.SIGINT, None)
except SystemExit as e:
    print(e.code, [p.poll() is not None for p in tasks.procs.values()])
"""
    try:
        out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                             text=True, timeout=120).stdout  # a hang guard, not a speed check
    finally:
        subprocess.run(["pkill", "-f", "--", marker], check=False)  # left by a hang
    assert out.split("\n")[0] == f"{128 + signal.SIGINT} [True, True]", out


def test_timeout_reached_is_the_reason_given(tmp_path):
    run = Run(tmp_path / "run", "--steps=100000", "--timeout=40")
    try:
        code = run.finish(timeout=600)
    finally:
        run.kill()
    assert code == 1
    summary = run.summary()
    assert re.fullmatch(r"--timeout=40 s reached at step \d+ of 100000",
                        summary["stop_reason"]), summary
    assert not summary["ok"] and summary["failed_tasks"] == {}
    assert re.search(r"^tlc: STOPPED: --timeout=40 s reached at step \d+ of 100000",
                     "\n".join(run.out), re.M), run.out
    assert re.search(r"^tlc: stopped: --timeout=40 s reached at step \d+ of 100000; stopped by "
                     r"the launcher: ps0, worker0, worker1", "\n".join(run.err), re.M), run.err
    assert "exited with an error" not in "\n".join(run.out + run.err)


def test_a_non_finite_gradient_is_one_line_naming_variable_step_and_worker(tmp_path):
    # Pulls at full precision: the workers' 3LC push meets the overflow first.
    run = Run(tmp_path / "run", "--learning_rate=1e12", "--pull_compressor=float32",
              "--steps=200")
    try:
        code = run.finish(timeout=600)
    finally:
        run.kill()
    assert code == 1
    failures = [line for line in run.out + run.err if "training step failed" in line]
    assert failures, run.out + run.err
    for line in failures:
        assert re.fullmatch(r"worker (\d): training step failed at step \d+: non-finite values in "
                            r"the gradient of model/\w+/\w+ on worker\1: (3lc: non-finite value "
                            r"\(x \+ error\) at element \d+ of \d+|non-finite value in an "
                            r"uncompressed gradient : Tensor had (NaN|Inf) values).*", line), line
        assert len(line) < 300, line
    assert failures[0].startswith("worker 0: ")  # the chief's own line, echoed


# --- the pieces, on recorded text -------------------------------------------

PULL_ERROR = ("From /job:ps/replica:0/task:0:\n3lc: non-finite value (x + error) at element 7031 "
              "of 51200\n\t [[{{node tlc_sync_replicas/tlc_encode_pull/model/conv2/w/"
              "TlcCompress3LC}}]]")
TRACE = ("Detected at node 'tlc_sync_replicas/tlc_encode_push/model/fc1/w/"
         "TlcCompress3LCUpdateError' defined at (most recent call last):\n"
         "    File \"<frozen runpy>\", line 198, in _run_module_as_main\n"
         "    File \"/work/main/tlc/ops.py\", line 30, in compress_3lc\n"
         "Node: 'tlc_sync_replicas/tlc_encode_push/model/fc1/w/TlcCompress3LCUpdateError'\n")
PUSH_ERROR = ("Graph execution error:\n\n" + TRACE + TRACE +
              "=====================\nINVALID_ARGUMENT: From /job:worker/replica:0/task:1:\n"
              "3lc: non-finite value (x + error) at element 4096 of 1605632\n"
              "\t [[{{node tlc_sync_replicas/tlc_encode_push/model/fc1/w/"
              "TlcCompress3LCUpdateError}}]]\n"
              "INVALID_ARGUMENT: From /job:ps/replica:0/task:0:\n"
              "3lc: non-finite value (x + error) at element 4096 of 1605632\n"
              "\t [[{{node tlc_sync_replicas/tlc_encode_push/model/fc1/w/"
              "TlcCompress3LCUpdateError}}]]\n"
              "Additional GRPC error information from remote target /job:worker/replica:0/task:1 "
              "while calling /tensorflow.WorkerService/RecvTensor:\n"
              ":UNKNOWN:Error received from peer  {grpc_status:3, grpc_message:\"3lc: non-finite "
              "value (x + error) at element 4096 of 1605632\\n\\t [[{{node tlc_sync_replicas/"
              "tlc_encode_push/model/fc1/w/TlcCompress3LCUpdateError}}]]\"}\n"
              "\t [[tlc_sync_replicas/TlcPackMessage_S99]]\n=====================")


def _error(message, step):
    error = tf.errors.InvalidArgumentError(None, None, message)
    error.tlc_step = step
    return error


def test_failure_line_names_the_model_delta_its_step_and_the_ps():
    assert task.failure_line(0, _error(PULL_ERROR, 2)) == (
        "worker 0: training step failed at step 2: non-finite values in the model delta of "
        "model/conv2/w on ps0: 3lc: non-finite value (x + error) at element 7031 of 51200")


def test_failure_line_keeps_the_first_cause_of_a_gradient_out_of_the_grpc_text():
    assert task.failure_line(1, _error(PUSH_ERROR, 3)) == (
        "worker 1: training step failed at step 3: non-finite values in the gradient of "
        "model/fc1/w on worker1: 3lc: non-finite value (x + error) at element 4096 of 1605632")


def test_failure_line_of_a_nan_loss_and_of_an_unknown_step():
    error = FloatingPointError("loss is nan")
    error.tlc_step = 7
    assert task.failure_line(1, error) == "worker 1: training step failed at step 7: loss is nan"
    lost = tf.errors.UnavailableError(None, None, (
        "From /job:ps/replica:0/task:0:\nrecvmsg:Connection reset by peer\nAdditional GRPC error "
        "information from remote target /job:ps/replica:0/task:0 while calling /tensorflow."
        "WorkerService/RunGraph:\n:UNKNOWN:Error received from peer  {grpc_message:\"recvmsg:"
        "Connection reset by peer\", grpc_status:14}"))
    assert task.failure_line(0, lost) == ("worker 0: training step failed: recvmsg:Connection "
                                          "reset by peer (on ps0)")


# Recorded in a chief's log (worker0.log) around a PS restart, tlc's lines among them.
RECOVERY_LOG = """\
step     34/150    0.09 steps/s  loss 0.6712  push      34.9 KiB/step  pull      45.7 KiB/step  ratio    64.9x
E0000 00:00:1795593010.171957   10072 master_session.cc:1972] Cleanup partition error: UNAVAILABLE: recvmsg:Connection reset by peer
Additional GRPC error information from remote target /job:ps/replica:0/task:0 while calling /tensorflow.WorkerService/CleanupGraph:
:UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"recvmsg:Connection reset by peer"}
W0000 00:00:1795593145.539837   25324 local_rendezvous.cc:412] Local rendezvous is aborting with status: ABORTED: Cleanup 53798785921716588 [type.googleapis.com/tensorflow.DerivedStatus='']
worker 0: ps0 at 10.213.0.1:2222 is reachable again
ERROR:tensorflow:An error occurred when attempting to close the session. This may be due to a preemption in a connected worker or parameter server. Error: From /job:ps/replica:0/task:0:
recvmsg:Connection reset by peer
Additional GRPC error information from remote target /job:ps/replica:0/task:0 while calling /tensorflow.WorkerService/RunGraph:
:UNKNOWN:Error received from peer  {grpc_message:"recvmsg:Connection reset by peer", grpc_status:14}
E1125 07:53:21.351518 139838858972032 monitored_session.py:1220] An error occurred when attempting to close the session. This may be due to a preemption in a connected worker or parameter server. Error: From /job:ps/replica:0/task:0:
recvmsg:Connection reset by peer
Socket closed
UNAVAILABLE: From /job:ps/replica:0/task:1:
=====================
tlc: parameter servers were restarted: model restored at step 100 from the chief's local copy (newer than checkpoint step 0); optimizer slots restarted at zero (6 variables re-initialised)
W0000 00:00:1795593290.045593    5298 local_rendezvous.cc:412] Local rendezvous is aborting with status: ABORTED: Cleanup 141028611058040408 [type.googleapis.com/tensorflow.DerivedStatus='']
step     35/150    0.09 steps/s  loss 0.6656  push      34.9 KiB/step  pull      45.7 KiB/step  ratio    64.9x
test accuracy 0.8123
"""


def test_tf_log_lines_and_their_continuations_stay_off_the_console():
    console = cl.ConsoleFilter()
    shown = [line for line in RECOVERY_LOG.splitlines()
             if console.shows(line.encode() + b"\n")]
    assert shown == [line for line in RECOVERY_LOG.splitlines()
                     if line.startswith(("step ", "worker 0:", "tlc:", "test accuracy"))]
    for line in RECOVERY_LOG.splitlines():
        if TF_LINE.match(line):
            assert cl._is_tf_noise(line.encode()), line  # pylint: disable=protected-access


class FakeProber:
    def __init__(self):
        self.answers = {}

    def last_answer(self, name):
        return self.answers.get(name)


def test_a_silent_server_is_named_at_growing_intervals_and_again_when_it_answers(capsys):
    prober, given_up = FakeProber(), []
    dog = watchdog.Watchdog("worker 1", {"ps0": "h:1"}, timeout=60, prober=prober,
                            stall_timeout=5, give_up=given_up.append)
    reported = {}
    prober.answers["ps0"] = 100.0
    assert not dog._silent("ps0", "h:1", 104.0, 0.0, reported)  # pylint: disable=protected-access
    assert dog._silent("ps0", "h:1", 105.5, 0.0, reported)  # pylint: disable=protected-access
    assert dog._silent("ps0", "h:1", 107.0, 0.0, reported)  # pylint: disable=protected-access
    assert dog._silent("ps0", "h:1", 111.0, 0.0, reported)  # pylint: disable=protected-access
    prober.answers["ps0"] = 111.5
    assert not dog._silent("ps0", "h:1", 112.0, 0.0, reported)  # pylint: disable=protected-access
    assert capsys.readouterr().out.splitlines() == [
        "worker 1: ps0 at h:1 has not answered for 5 s (it accepts connections: stopped or "
        "stuck?; --stall_timeout=5)",
        "worker 1: ps0 at h:1 has not answered for 10 s (it accepts connections: stopped or "
        "stuck?; --stall_timeout=5)",
        "worker 1: ps0 at h:1 answers again"]
    with pytest.raises(watchdog._GaveUp):  # pylint: disable=protected-access
        dog._silent("ps0", "h:1", 171.5, 0.0, reported)  # pylint: disable=protected-access
    assert given_up == ["worker 1: giving up: ps0 at h:1 has not answered for 60 s "
                        "(--unreachable_timeout=60)"]


def test_failure_summary_reads_the_failure_line_with_its_step(tmp_path):
    (tmp_path / "worker0.log").write_text(
        "step     20/200    5.19 steps/s  loss 1.2323  push     137.9 KiB/step  pull     102.4 "
        "KiB/step  ratio    54.1x\n"
        + task.failure_line(0, _error(PULL_ERROR, 21)) + "\n")
    assert launcher.failure_summary(str(tmp_path)) == (
        "step 20/200 loss 1.2323; non-finite values in the model delta of model/conv2/w on ps0: "
        "3lc: non-finite value (x + error) at element 7031 of 51200")
