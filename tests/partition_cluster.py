"""A main-job cluster whose tasks each live in a network namespace of their
own, so that one task's link can be cut (both directions, at the bridge) and
restored, and any task killed and started again, while the others run on.

Used by tests/test_partitions.py. Every wait is on an event (a step the chief
printed, a line in a log, a process exit), with a timeout that only bounds a
failure."""
import json
import os
import re
import subprocess
import time

from benchmarks.jobs import wait_for
from tlc.job import cluster as cl
from tlc.job import launcher, plots

from testbed import netem  # type: ignore  # pylint: disable=import-error

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AVAILABLE, WHY = netem.netem_available()


class NetCluster:
    """PS and worker processes of `python -m tlc.train`, one namespace each."""

    def __init__(self, logdir, num_ps, num_workers, flags, rate=None):
        self.logdir, self.flags = str(logdir), list(flags)
        self.num_ps, self.num_workers = num_ps, num_workers
        self.net = netem.SlowNetwork(num_ps + num_workers, rate=rate)
        self.spec = cl.local_cluster(num_ps, num_workers, hosts=[ip for _, ip in self.net.hosts])
        self.order = cl.tasks(self.spec)
        self.launcher = cl.TaskProcesses(self.spec, self.command, self.logdir, prefix=self.prefix,
                                    echo_chief=False)
        self.restarts = {}  # task -> how many times it was started again
        self.events = []    # (seconds since start, what the test did, chief's step)
        self.healed = []    # wall times at which a cut link was up again
        self.start_time = None

    # ---- lifetime ---------------------------------------------------------

    def __enter__(self):
        self.net.__enter__()
        try:
            self.start_time = time.time()
            self.launcher.start()
        except BaseException:
            self.net.close()
            raise
        return self

    def __exit__(self, *exc):
        try:
            self.launcher.stop()
        finally:
            self.net.close()
        return False

    def command(self, job, index):
        argv = launcher.task_command(self.spec, job, index, self.logdir, self.flags)
        if os.environ.get("TLC_VERBOSE_TASKS") == "1":  # TF's INFO lines in the task logs
            assert argv[1:3] == ["-m", "tlc.train"], argv
            argv[1:3] = [os.path.join(ROOT, "tests", "verbose_train.py")]
        return argv

    def prefix(self, job, index):
        return self.net.command_prefix(self.order.index((job, index)))

    def _note(self, what):
        self.events.append((round(time.time() - self.start_time, 1), what, self.chief_step()))
        print(f"[{self.events[-1][0]:7.1f} s] {what} (chief at step {self.events[-1][2]})",
              flush=True)

    # ---- faults -----------------------------------------------------------

    def _port(self, job, index):
        return f"p{self.order.index((job, index))}"

    def cut(self, job, index):
        """Cuts the task's link at the bridge: nothing goes in or out."""
        subprocess.run(["ip", "-n", self.net.bridge_ns, "link", "set", self._port(job, index),
                        "down"], check=True)
        self._note(f"cut {job}{index}")

    def heal(self, job, index):
        subprocess.run(["ip", "-n", self.net.bridge_ns, "link", "set", self._port(job, index),
                        "up"], check=True)
        # Until the kernel marks the port up it drops frames (see netem).
        port = self._port(job, index)

        def up():
            out = subprocess.run(["ip", "-j", "-n", self.net.bridge_ns, "link", "show", "dev",
                                  port], capture_output=True, text=True, check=True).stdout
            return json.loads(out)[0].get("operstate") == "UP"
        wait_for(up, 20, f"{port} up")
        self.healed.append(time.time())
        self._note(f"healed {job}{index}")

    def kill(self, job, index):
        proc = self.launcher.procs[(job, index)]
        os.killpg(proc.pid, 9)
        proc.wait()
        self._note(f"killed {job}{index}")

    def restart(self, job, index):
        """Starts the task again in its namespace; its output goes to
        <job><index>.restart<n>.log."""
        n = self.restarts[(job, index)] = self.restarts.get((job, index), 0) + 1
        log = open(os.path.join(self.logdir, f"{job}{index}.restart{n}.log"), "wb")
        self.launcher.procs[(job, index)] = subprocess.Popen(
            self.prefix(job, index) + self.command(job, index), stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            env=cl._task_env())  # pylint: disable=protected-access
        log.close()
        self._note(f"restarted {job}{index}")

    # ---- observing --------------------------------------------------------

    def logs(self, job, index):
        """The task's log text, then those of its restarts."""
        names = [f"{job}{index}.log"] + [f"{job}{index}.restart{n}.log"
                                         for n in range(1, self.restarts.get((job, index), 0) + 1)]
        text = []
        for name in names:
            try:
                with open(os.path.join(self.logdir, name), encoding="utf-8",
                          errors="replace") as f:
                    text.append(f.read())
            except FileNotFoundError:
                pass
        return "\n".join(text)

    def chief_step(self):
        return launcher.printed_step(self.logdir)

    def chief_steps(self):
        """Every step the chief printed, in order (its restarts included)."""
        return [int(s) for s in re.findall(r"^step\s+(\d+)/", self.logs("worker", 0), re.M)]

    def wait_step(self, step, timeout):
        wait_for(lambda: self.chief_step() >= step or self.failed_worker(), timeout,
                 f"the chief to print step {step}")
        dead = self.failed_worker()
        assert not dead, f"{dead} exited early:\n{self.tail(*dead)}"

    def failed_worker(self):
        """A worker that exited with an error, as (job, index), or None."""
        for (job, index), proc in self.launcher.procs.items():
            if job == "worker" and proc.poll() not in (None, 0):
                return (job, index)
        return None

    def resume_seconds(self):
        """For each healed link, seconds from its return to the first global
        step the chief completed after it (from the chief's own step record,
        written when it finishes)."""
        with open(os.path.join(self.logdir, plots.STEPS_FILE), encoding="utf-8") as f:
            record = json.load(f)
        done = [record["start_time"] + s for s in record["seconds"]]
        return [round(min(t for t in done if t > healed) - healed, 1) for healed in self.healed]

    def tail(self, job, index, chars=3000):
        return f"--- {job}{index} ---\n" + self.logs(job, index)[-chars:]

    def finish(self, timeout):
        """Waits for every worker, then summarises as the main job does
        (summary.json); returns (summary, exit codes)."""
        end = time.time() + timeout
        for (job, index), proc in list(self.launcher.procs.items()):
            if job == "worker":
                try:
                    proc.wait(max(1.0, end - time.time()))
                except subprocess.TimeoutExpired:
                    pass
        for (job, index), proc in list(self.launcher.procs.items()):
            if job == "ps":  # released by the workers' "done"
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    pass
        codes = {task: proc.poll() for task, proc in self.launcher.procs.items()}
        summary = launcher.summarize(self.logdir, self.spec, codes,
                                     time.time() - self.start_time)
        return summary, codes

    def all_tails(self):
        return "\n".join(self.tail(job, index) for job, index in self.order)
