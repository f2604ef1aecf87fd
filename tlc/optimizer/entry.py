"""What the optimizer builds for one variable."""


class Entry:
    """One variable: its local copy (what the worker's model reads), its
    master (the PS copy the inner optimizer updates) and what is built for it.

    kind: "pushed" (has a gradient), "pulled" (a local copy without a
    gradient: kept equal to its master through the pull), "statistic" (a
    variable each worker keeps for itself, e.g. batch-norm moving averages;
    the chief's copy is written to the master, the one saved and evaluated)."""

    def __init__(self, local, master, compressed, kind="pushed"):
        self.local = local
        self.master = master
        self.compressed = compressed
        self.kind = kind
        self.shadow = None          # PS: what every worker holds
        self.accumulator = None
        self.aggregated = None      # PS: the averaged IndexedSlices (row-sparse gradients)
        self.push_payload = None    # the tensors a push sends for this variable
        self.push_memory = None     # worker: the push's error-feedback variables
        self.pull_payload = None    # PS: the pull compression's output, once counted
        self.sparse = False         # the gradient is row-sparse (IndexedSlices)
        self.pull_rows = False      # the pull logs only the rows a step changed

    @property
    def name(self):
        return self.master.op.name

    @property
    def has_local_copy(self):
        return self.local is not self.master

    @property
    def num_elements(self):
        return self.master.shape.num_elements()

    @property
    def dtype(self):
        return self.master.dtype.base_dtype
