"""Walking a TF graph backwards, for tests that check what an op waits for."""


def ancestors(op):
    """Every op `op` depends on, through data and control edges (not `op`
    itself unless it depends on itself)."""
    seen, todo = set(), [op]
    while todo:
        current = todo.pop()
        for parent in [t.op for t in current.inputs] + list(current.control_inputs):
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return seen
