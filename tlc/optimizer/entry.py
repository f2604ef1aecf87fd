"""What the optimizer builds for one variable."""


class Entry:
    """Everything the optimizer builds for one variable."""
    def __init__(self, local, master, compressed):
        self.local = local          # what the worker's model reads
        self.master = master        # PS copy the inner optimizer updates
        self.compressed = compressed
        self.shadow = None          # PS: what every worker holds
        self.log = None             # PS: step -> serialized pull payload
        self.payload_dtypes = None
        self.accumulator = None
        self.aggregated = None      # PS: the averaged IndexedSlices (row-sparse gradients)
        self.push_payload = None    # row-sparse gradients: the tensors a push sends
        self.pull_payload = None    # PS: the pull compression's output, once counted

    @property
    def has_local_copy(self):
        return self.local is not self.master

    @property
    def num_elements(self):
        return self.master.shape.num_elements()
