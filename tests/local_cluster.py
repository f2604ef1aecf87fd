"""In-process clusters for optimizer tests: one tf.distribute.Server per task
on loopback ports, like TF's test_util.create_local_cluster."""
import threading

import tensorflow as tf

import tlc.ops  # noqa: F401  (the kernels, for the in-process parameter servers)
from tlc import replica
from tlc.job.cluster import free_ports


def worker_graph_with_model(worker_id, initial):
    """A new graph for /job:worker/task:<worker_id> holding the global step
    and one variable per (name, initial numpy value) in `initial` on
    /job:ps/task:0, each with a local copy on the worker. Returns (graph,
    worker device, global step, [variables])."""
    graph = tf.Graph()
    worker = f"/job:worker/task:{worker_id}"
    with graph.as_default(), replica.local_copies(worker):
        with tf.compat.v1.device("/job:ps/task:0"):
            global_step = tf.compat.v1.train.get_or_create_global_step()
            variables = [tf.Variable(value, name=name) for name, value in initial]
    return graph, worker, global_step, variables


def create_local_cluster(num_workers, num_ps):
    """Returns (worker servers, ps servers), all started in this process."""
    # All ports taken in one call: ports bound one after another and released
    # in between can come back twice (CI once gave a PS and a worker one port).
    ports = [f"localhost:{p}" for p in free_ports(num_workers + num_ps)]
    spec = {"worker": ports[:num_workers], "ps": ports[num_workers:]}
    cluster = tf.train.ClusterSpec(spec)
    workers = [tf.distribute.Server(cluster, job_name="worker", task_index=i, start=True)
               for i in range(num_workers)]
    ps = [tf.distribute.Server(cluster, job_name="ps", task_index=i, start=True)
          for i in range(num_ps)]
    return workers, ps


def crossing(metadata):
    """(tensor name, send device, recv device) of every tensor that crossed
    between a worker and a PS in one run: each is one _Recv in TF's
    partition graphs (RunOptions(output_partition_graphs=True)), one
    RecvTensor RPC."""
    found = []
    for partition in metadata.partition_graphs:
        for node in partition.node:
            if node.op in ("_Recv", "_HostRecv"):
                ends = [node.attr[k].s.decode() for k in ("send_device", "recv_device")]
                if ("/job:worker" in ends[0]) != ("/job:worker" in ends[1]):
                    found.append((node.attr["tensor_name"].s.decode(), *ends))
    return found


def in_threads(*calls, timeout=120):
    """Runs the calls at once; returns their results; fails naming the ones
    still blocked after `timeout` (a deadlock)."""
    results, errors, threads = [None] * len(calls), [], []
    for i, call in enumerate(calls):
        def run(i=i, call=call):
            try:
                results[i] = call()
            except Exception as e:  # pylint: disable=broad-except
                errors.append(e)
        threads.append(threading.Thread(target=run, daemon=True))
        threads[-1].start()
    for thread in threads:
        thread.join(timeout)
    blocked = [i for i, t in enumerate(threads) if t.is_alive()]
    assert not blocked, f"calls {blocked} still blocked after {timeout} s: a deadlock"
    assert not errors, errors
    return results
