"""Which variables the optimizer handles, and which parameter server each is on."""
import dataclasses

import tensorflow as tf

from tlc import replica
from tlc.optimizer import sparse, state
from tlc.optimizer.channel import Channel
from tlc.optimizer.entry import Entry


def entries(config, grads_and_vars):
    """(entries, {entry name: gradient}). Every local copy of the graph gets
    an entry: with a gradient it is pushed; without one (unused by the loss,
    left out of var_list, a frozen layer) it is only pulled, so it stays equal
    to its master; a worker-kept statistic goes to the master from the chief."""
    found, grads = [], {}
    for grad, var in grads_and_vars:
        master = replica.master_of(var)
        master = var if master is None else master
        if grad is None:
            continue
        dtype = master.dtype.base_dtype
        if not dtype.is_floating:
            raise ValueError(f"tlc: variable {master.name} is {dtype.name}; only float "
                             "variables can be trained")
        if isinstance(grad, tf.IndexedSlices) and dtype != tf.float32:
            raise ValueError(f"tlc: variable {master.name} has a sparse (IndexedSlices) "
                             f"gradient of {dtype.name}; sparse pushes are float32 only")
        entry = Entry(var, master, master.shape.num_elements() >= config.compress_threshold,
                      sparse=isinstance(grad, tf.IndexedSlices))
        entry = dataclasses.replace(entry, pull_rows=sparse.pulls_rows(config, entry))
        found.append(entry)
        grads[entry.name] = grad
    if not found:
        raise ValueError("No gradients provided for any variable")
    pushed = {e.master.name for e in found}
    for local in replica.local_copies_of_graph():
        master = replica.master_of(local)
        if master.name in pushed:
            continue
        kind = "statistic" if replica.is_statistic(local) else "pulled"
        compressed = kind == "pulled" and master.shape.num_elements() >= config.compress_threshold
        found.append(Entry(local, master, compressed, kind))
    return [_with_shadow(e) for e in found], grads


def _with_shadow(entry):
    """A compressed pull keeps a shadow on the PS (saved: master - shadow is
    the pull's residual), on its master's device spelt the same: TF's
    sharded saver groups by that string (one shard per PS, as a stock job)."""
    if not (entry.compressed and entry.is_pulled):
        return entry
    with tf.device(entry.master.device):
        shadow = state.server_variable(entry.master.shape, entry.dtype,
                                       entry.name + "/tlc_shadow", saved=True)
    return dataclasses.replace(entry, shadow=shadow)


def channels(all_entries, global_step):
    """One channel per parameter server, the global step's first."""
    by_server = {replica.host_device(global_step.device): []}
    for entry in all_entries:
        by_server.setdefault(replica.host_device(entry.master.device), []).append(entry)
    return [Channel(device, members) for device, members in by_server.items()]
