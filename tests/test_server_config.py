"""Issue 30: the config the main job's tasks give their tf.distribute.Server
(tlc.session.server_config, which tlc/job/task.py uses and a user's own job
may). A parameter server's TF thread pools do not spin waiting for work
(docs/scaling/ps_load.md, "TF's pools not spinning": PS CPU per extra worker
lower by 0.2-0.7 ms in four interleaved pairs of cells, steps as fast); a
worker's do, as TF's defaults have them. Checked on the server TF builds from
it (its ServerDef), not only on the proto."""
import pytest
import tensorflow as tf

from tlc import session
from tlc.job import cluster

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("job, spins", [("ps", False), ("worker", True)])
def test_only_a_parameter_server_stops_spinning(job, spins):
    spec = cluster.local_cluster(num_ps=1, num_workers=1)
    config = session.server_config(job, 0)
    server = tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=job, task_index=0,
                                  config=config, start=False)
    served = server.server_def.default_session_config
    assert served.experimental.disable_thread_spinning is (not spins)
    # What a task sees: the PS only itself; a worker the PS and itself.
    own = f"/job:{job}/task:0"
    want = [own] if job == "ps" else ["/job:ps", own]
    assert list(served.device_filters) == want
