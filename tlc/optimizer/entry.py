"""What the layout decides for one variable. Everything later phases build
for it (push payloads, accumulators, pull records) is in their own records
(records.py); an Entry is complete when it is made and never changes."""
import dataclasses

import tensorflow as tf


@dataclasses.dataclass(frozen=True, eq=False)
class Entry:
    """One variable: its local copy (what the worker's model reads), its
    master (the PS copy the inner optimizer updates) and how it travels.

    kind: "pushed" (has a gradient), "pulled" (a local copy without a
    gradient: kept equal to its master through the pull), "statistic" (a
    variable each worker keeps for itself, e.g. batch-norm moving averages;
    the chief's copy is written to the master, the one saved and evaluated).
    sparse: the gradient is row-sparse (IndexedSlices).
    pull_rows: the pull logs only the rows a step changed.
    shadow: on the PS, what every worker holds (compressed pulls only)."""

    local: tf.Variable
    master: tf.Variable
    compressed: bool
    kind: str = "pushed"
    sparse: bool = False
    pull_rows: bool = False
    shadow: tf.Variable = None

    @property
    def name(self):
        return self.master.op.name

    @property
    def has_local_copy(self):
        return self.local is not self.master

    @property
    def is_pulled(self):
        """Workers pull it: a local copy of a trained or untrained variable."""
        return self.has_local_copy and self.kind != "statistic"

    @property
    def num_elements(self):
        return self.master.shape.num_elements()

    @property
    def dtype(self):
        return self.master.dtype.base_dtype
