"""TF_CONFIG as Kubeflow's TFJob sets it (chief, worker, ps; an evaluator
outside the cluster), for the main job (tlc.job.cluster.from_tf_config) and
examples/own_job.py. The chief is tlc's worker 0, TFJob's worker i tlc's
worker i + 1; every task resolves the same cluster."""
import json
import os

import pytest

from test_example_job import run_own_job  # examples/own_job.py's processes
from tlc.job.cluster import ClusterError, free_ports, from_tf_config

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tfjob_config(cluster, job, index):
    """The TF_CONFIG TFJob's operator writes into each pod (JSON text)."""
    return json.dumps({"cluster": cluster, "task": {"type": job, "index": index},
                       "environment": "cloud"})


TFJOB = {"chief": ["mnist-chief-0.default.svc:2222"],
         "ps": ["mnist-ps-0.default.svc:2222", "mnist-ps-1.default.svc:2222"],
         "worker": ["mnist-worker-0.default.svc:2222", "mnist-worker-1.default.svc:2222"]}
RESOLVED = {"ps": TFJOB["ps"], "worker": TFJOB["chief"] + TFJOB["worker"]}


@pytest.mark.parametrize("job,index,role", [
    ("chief", 0, ("worker", 0)), ("worker", 0, ("worker", 1)), ("worker", 1, ("worker", 2)),
    ("ps", 0, ("ps", 0)), ("ps", 1, ("ps", 1))])
def test_every_tfjob_task_resolves_the_same_cluster(job, index, role):
    assert from_tf_config(tfjob_config(TFJOB, job, index)) == (RESOLVED, *role)


def test_an_evaluator_listed_in_the_cluster_is_left_out():
    cluster = {**TFJOB, "evaluator": ["mnist-evaluator-0.default.svc:2222"]}
    assert from_tf_config(tfjob_config(cluster, "chief", 0)) == (RESOLVED, "worker", 0)


def test_the_evaluator_exits_with_0(capsys):
    with pytest.raises(SystemExit) as exit_:
        from_tf_config(tfjob_config(TFJOB, "evaluator", 0))
    assert exit_.value.code == 0
    assert "evaluator 0: nothing to run" in capsys.readouterr().out


def test_chief_and_ps_only():
    cluster = {"chief": TFJOB["chief"], "ps": TFJOB["ps"][:1]}
    assert from_tf_config(tfjob_config(cluster, "chief", 0)) == (
        {"ps": TFJOB["ps"][:1], "worker": TFJOB["chief"]}, "worker", 0)


def test_plain_ps_worker_config_is_unchanged():
    cluster = {"ps": TFJOB["ps"], "worker": TFJOB["worker"]}
    assert from_tf_config(tfjob_config(cluster, "worker", 1)) == (cluster, "worker", 1)


@pytest.mark.parametrize("cluster,job,index,message", [
    ({**TFJOB, "chief": TFJOB["worker"]}, "chief", 0, "'chief' must list exactly one host:port"),
    (TFJOB, "chief", 1, "task chief 1: there is only chief 0"),
    ({"ps": TFJOB["ps"], "worker": TFJOB["worker"]}, "chief", 0, "has no 'chief' job"),
    (TFJOB, "worker", 2, "task_index 3 is outside the cluster's 3 worker task(s)"),
    ({**TFJOB, "master": ["m:1"]}, "ps", 0, "unknown jobs ['master']"),
])
def test_bad_configs_are_refused_in_one_line(cluster, job, index, message):
    with pytest.raises(ClusterError) as error:
        from_tf_config(tfjob_config(cluster, job, index))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_own_job_trains_and_exits_under_tfjob_tf_config():
    """chief + worker + ps (+ an evaluator) as processes on loopback."""
    ports = free_ports(3)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"],
               "ps": [f"127.0.0.1:{ports[2]}"]}
    output, _ = run_own_job({
        (job, index): (["--steps=40"], {"TF_CONFIG": tfjob_config(cluster, job, index)})
        for job, index in (("ps", 0), ("chief", 0), ("worker", 0), ("evaluator", 0))})
    # The chief ran as tlc's worker 0, TFJob's worker 0 as worker 1; both trained.
    assert "worker 0: last step at" in output[("chief", 0)], output[("chief", 0)]
    assert "worker 1: last step at" in output[("worker", 0)], output[("worker", 0)]
    assert "tlc traffic: step" in output[("chief", 0)], output[("chief", 0)]
    assert "ps 0: exiting at" in output[("ps", 0)]
    assert "nothing to run" in output[("evaluator", 0)]


def test_the_tfjob_manifest_runs_the_main_job_in_every_replica():
    yaml = pytest.importorskip("yaml")
    with open(os.path.join(ROOT, "scripts", "tfjob_example.yaml"), encoding="utf-8") as f:
        job = yaml.safe_load(f)
    assert job["kind"] == "TFJob"
    specs = job["spec"]["tfReplicaSpecs"]
    assert set(specs) == {"Chief", "Worker", "PS"}
    # The TF_CONFIG the operator derives from it, for every pod.
    name = job["metadata"]["name"]
    cluster = {kind.lower(): [f"{name}-{kind.lower()}-{i}.default.svc:2222"
                              for i in range(spec["replicas"])] for kind, spec in specs.items()}
    for kind, spec in specs.items():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["name"] == "tensorflow" and container["ports"][0]["containerPort"] == 2222
        assert container["command"][:3] == ["python3", "-m", "tlc.train"]
        for flag in container["command"][3:]:
            if flag.startswith("--flagfile="):
                assert os.path.exists(os.path.join(ROOT, flag.split("=", 1)[1])), flag
        for index in range(spec["replicas"]):
            resolved, _, _ = from_tf_config(tfjob_config(cluster, kind.lower(), index))
            assert len(resolved["worker"]) == specs["Chief"]["replicas"] + specs["Worker"]["replicas"]
