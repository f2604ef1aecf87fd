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


def takes_token(op):
    """The op dequeues a token, or is a cond with a dequeue in a branch (a
    step whose token was lost takes none: worker_step.take_token)."""
    if op.type == "QueueDequeueV2":
        return True
    if op.type not in ("If", "StatelessIf"):
        return False
    for branch in ("then_branch", "else_branch"):
        body = op.graph._get_function(op.get_attr(branch).name)  # pylint: disable=protected-access
        if any(node.op == "QueueDequeueV2" for node in body.definition.node_def):
            return True
    return False
