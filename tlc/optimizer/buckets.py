"""How a channel splits its pushed variables into push messages (buckets).

Backprop computes the last layers' gradients first, so the buckets are sent
last layers first, each as soon as its own gradients are compressed. What is
not overlapped is the last bucket: it waits for the end of backprop, then
crosses to the PS and back. So buckets are closed from the first layers on,
each once it holds a 1/most share of the gradient bytes or of backprop's
work, and the last layers (first sent) take the rest. In a CNN the first
layers are most of the work and few of the bytes: the bucket that is left
for after backprop is then small (ResNet-20: its first stage, 5 % of the
bytes; closing by bytes alone left 24 % of the bytes and 2/3 of the work in
it). Work per variable is estimated from the graph (multiply_adds)."""
import math

# One push message when the float32 gradients are smaller than this (each
# message costs a head and an RPC); else up to Config.push_buckets.
ONE_BUCKET_BELOW_BYTES = 64 * 1024

# Ops that slide a filter (their input 1) over positions: each filter
# element is one multiply-add per position of the image the filter meets
# (None: the output's; a transposed convolution's: its input 2's).
CONVOLUTIONS = {"Conv2D": None, "Conv3D": None, "DepthwiseConv2dNative": None,
                "Conv2DBackpropInput": 2, "Conv3DBackpropInputV2": 2}
# Ops a read passes through on its way to the layer (tf.nn.conv1d expands
# its filter to a Conv2D's).
READS = {"ReadVariableOp", "Identity", "Cast", "Enter", "ExpandDims"}


def multiply_adds(variable, training=None, depth=4):
    """Per example, the multiply-adds of the layers reading `variable`:
    its elements times the positions of a convolution that slides it, times
    one otherwise (a dense kernel, a bias, a scale). Positions that are not
    known when the graph is built count as one. training: if given, the ops
    the gradients depend on; a convolution outside them (an evaluation tower
    on other images, say) is not counted, so that every worker building the
    same training graph splits alike."""
    positions = 1
    carried = [variable.op.outputs[0]]
    for _ in range(depth):
        following = []
        for tensor in carried:
            for op in tensor.consumers():
                if op.type in READS:
                    following += op.outputs
                elif (op.type in CONVOLUTIONS and op.inputs[1] is tensor
                      and (training is None or op in training)):
                    positions = max(positions, _positions(op))
        carried = following
    return variable.shape.num_elements() * positions


def ops_behind(tensors):
    """Every op the tensors (tf.IndexedSlices too) depend on through data."""
    stack = [t.op for x in tensors for t in ((x.values, x.indices)
                                             if hasattr(x, "indices") else (x,))]
    seen = set()
    while stack:
        op = stack.pop()
        if op not in seen:
            seen.add(op)
            stack += [t.op for t in op.inputs]
    return seen


def _positions(conv):
    """Positions per example and channel of the image a convolution's filter
    meets (1 if unknown)."""
    image_input = CONVOLUTIONS[conv.type]
    image = conv.outputs[0] if image_input is None else conv.inputs[image_input]
    shape = image.shape
    if shape.rank is None or shape.rank < 3:
        return 1
    channels_first = conv.get_attr("data_format").decode().startswith("NC")
    spatial = shape[2:] if channels_first else shape[1:-1]
    dims = spatial.as_list()
    return math.prod(dims) if all(d is not None for d in dims) else 1


def push_buckets(pushed, most, gradients=None):
    """The pushed entries (var_list order: first layers first) as at most
    `most` buckets in send order, last layers first (gradients: theirs, whose
    graph says which layers train). Always at least one bucket (maybe empty:
    the statistics still go)."""
    sizes = [e.dtype.size * e.num_elements for e in pushed]
    total_bytes = sum(sizes)
    if total_bytes < ONE_BUCKET_BELOW_BYTES or most == 1:
        return [list(reversed(pushed))]
    training = ops_behind(gradients) if gradients is not None else None
    work = [multiply_adds(e.local, training) for e in pushed]
    total_work = sum(work) or 1
    closed, current, nbytes, nwork = [], [], 0, 0
    for entry, size, cost in zip(pushed, sizes, work):
        current.append(entry)
        nbytes, nwork = nbytes + size, nwork + cost
        if len(closed) < most - 1 and (nbytes * most >= total_bytes
                                       or nwork * most >= total_work):
            closed.append(current)
            current, nbytes, nwork = [], 0, 0
    # The rest (the last layers) is sent first; a rest holding under a share
    # of both goes with the bucket before it rather than cost a message.
    if current and closed and nbytes * most < total_bytes and nwork * most < total_work:
        closed[-1] += current
    elif current or not closed:
        closed.append(current)
    return [list(reversed(bucket)) for bucket in reversed(closed)]
