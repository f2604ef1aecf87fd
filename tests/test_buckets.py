"""The push's split into buckets (tlc/optimizer/buckets.py): the work a
variable's layer costs, from the graph, and buckets closed from the first
layers on, so that what is left to cross after backprop is small.

Oracles: the multiply-adds of a convolution and of a dense layer by their
textbook formulas (filter elements x output positions; kernel elements), and
ResNet-20's stages as He et al. define them."""
import pytest
import tensorflow as tf

from tlc import replica
from tlc.job import models
from tlc.optimizer import buckets

pytestmark = pytest.mark.unit


class _Entry:
    """What push_buckets reads of an entry."""

    def __init__(self, variable):
        self.local = variable
        self.name = variable.op.name
        self.dtype = variable.dtype.base_dtype
        self.num_elements = variable.shape.num_elements()


def _variable(name, shape):
    return tf.compat.v1.get_variable(name, shape, use_resource=True)


def test_multiply_adds_of_convolutions_dense_layers_and_biases():
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 28, 28, 3])
        same = _variable("same", [3, 3, 3, 16])
        strided = _variable("strided", [5, 5, 16, 8])
        dense = _variable("dense", [14 * 14 * 8, 10])
        bias = _variable("bias", [10])
        y = tf.nn.conv2d(x, same, strides=1, padding="SAME")              # 28 x 28 out
        y = tf.nn.conv2d(y, tf.identity(strided), strides=2, padding="SAME")  # 14 x 14 out
        logits = tf.matmul(tf.reshape(y, [-1, 14 * 14 * 8]), dense) + bias
        del logits
        assert buckets.multiply_adds(same) == 3 * 3 * 3 * 16 * 28 * 28
        assert buckets.multiply_adds(strided) == 5 * 5 * 16 * 8 * 14 * 14
        assert buckets.multiply_adds(dense) == 14 * 14 * 8 * 10
        assert buckets.multiply_adds(bias) == 10


def test_multiply_adds_of_1d_transposed_and_depthwise_convolutions():
    """conv1d expands its filter into a Conv2D's; a transposed convolution
    meets its input's positions; a variable fed as a convolution's image
    (not its filter) counts its elements."""
    with tf.Graph().as_default():
        signal = tf.compat.v1.placeholder(tf.float32, [None, 100, 4])
        taps = _variable("taps", [5, 4, 8])
        tf.nn.conv1d(signal, taps, stride=1, padding="VALID")               # 96 out
        small = tf.compat.v1.placeholder(tf.float32, [None, 7, 7, 8])
        up = _variable("up", [3, 3, 4, 8])
        tf.nn.conv2d_transpose(small, up, [1, 14, 14, 4], strides=2)         # meets 7 x 7
        depthwise = _variable("depthwise", [3, 3, 8, 2])
        tf.nn.depthwise_conv2d(small, depthwise, [1, 1, 1, 1], "SAME")     # 7 x 7 out
        image = _variable("image", [1, 6, 6, 2])
        tf.nn.conv2d(image, tf.ones([3, 3, 2, 2]), strides=1, padding="SAME")
        assert buckets.multiply_adds(taps) == 5 * 4 * 8 * 96
        assert buckets.multiply_adds(up) == 3 * 3 * 4 * 8 * 7 * 7
        assert buckets.multiply_adds(depthwise) == 3 * 3 * 8 * 2 * 7 * 7
        assert buckets.multiply_adds(image) == 6 * 6 * 2


def test_multiply_adds_with_unknown_positions_count_elements():
    """A fully convolutional model on images of any size: positions unknown
    when the graph is built, so the filter counts as its elements (the
    split is then by bytes, as before)."""
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, None, None, 3])
        w = _variable("w", [3, 3, 3, 4])
        tf.nn.conv2d(x, w, strides=1, padding="SAME")
        assert buckets.multiply_adds(w) == 3 * 3 * 3 * 4


def _convnet(eval_tower):
    """Four 3x3 convolutions on 8x8 images and a dense layer, trained; with
    eval_tower, the first convolution also runs on 128x128 images (say, an
    evaluation on larger images built on the chief only). Returns (entries,
    gradients)."""
    widths = [1, 16, 32, 64, 64]
    images = tf.compat.v1.placeholder(tf.float32, [None, 8, 8, 1])
    kernels = [_variable(f"conv{i}", [3, 3, widths[i], widths[i + 1]]) for i in range(4)]
    dense = _variable("dense", [8 * 8 * 64, 10])
    x = images
    for k in kernels:
        x = tf.nn.relu(tf.nn.conv2d(x, k, strides=1, padding="SAME"))
    loss = tf.reduce_sum(tf.matmul(tf.reshape(x, [-1, 8 * 8 * 64]), dense))
    if eval_tower:
        large = tf.compat.v1.placeholder(tf.float32, [None, 128, 128, 1])
        tf.nn.conv2d(large, kernels[0], strides=1, padding="SAME")
    variables = kernels + [dense]
    return [_Entry(v) for v in variables], tf.gradients(loss, variables)


def test_only_the_training_graph_decides_the_split():
    """Every worker must split alike (the PS's rows are per bucket): a
    convolution the gradients do not depend on does not move the split."""
    def split(eval_tower, with_gradients=True):
        with tf.Graph().as_default():
            entries, gradients = _convnet(eval_tower)
            found = buckets.push_buckets(entries, 3, gradients if with_gradients else None)
            return [[e.name for e in b] for b in found]

    trained = split(eval_tower=False)
    assert len(trained) == 3
    assert split(eval_tower=True) == trained
    # The check can fail: counting the evaluation's convolution moves the split.
    assert split(eval_tower=True, with_gradients=False) != trained


def _resnet20_entries():
    graph = tf.Graph()
    with graph.as_default():
        images = tf.compat.v1.placeholder(tf.float32, [None, 28, 28, 1])
        with replica.local_copies("/job:worker/task:0"):
            models.resnet(images, 20, 10, True)
        trained = graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    return [_Entry(v) for v in trained]


def test_resnet20_leaves_only_its_first_stage_for_after_backprop():
    """Three buckets: the last (sent when backprop ends) is the stem and the
    first stage, 5 % of the bytes; closing by bytes from the logits on left
    stage 1 in it too (24 % of the bytes, 2/3 of the work). Sent last layers
    first, each bucket a run of layers."""
    entries = _resnet20_entries()
    split = buckets.push_buckets(entries, 3)
    names = [[e.name for e in bucket] for bucket in split]
    assert len(split) == 3
    assert names[0][0].startswith("logits/") and names[-1][-1].startswith("conv0/")
    assert sorted(n for b in names for n in b) == sorted(e.name for e in entries)
    last = {n.split("/")[0].split("_")[0] for n in names[-1]}
    assert last == {"conv0", "bn0", "stage0"}, names[-1]
    total = sum(e.num_elements for e in entries)
    assert sum(e.num_elements for e in split[-1]) < 0.1 * total
    order = [e.name for bucket in reversed(split) for e in reversed(bucket)]
    assert order == [e.name for e in entries]


@pytest.mark.parametrize("most", [1, 2, 3, 5, 16])
def test_every_bucket_holds_a_share(most):
    """Buckets closed from the first layers hold a 1/most share of the bytes
    or of the work; the rest goes first, and is a bucket of its own only if
    it holds a share too (else one more message would carry little)."""
    entries = _resnet20_entries()
    split = buckets.push_buckets(entries, most)
    assert 1 <= len(split) <= most
    nbytes = [sum(e.num_elements for e in b) for b in split]
    work = [sum(buckets.multiply_adds(e.local) for e in b) for b in split]
    for i in range(len(split)):
        assert nbytes[i] * most >= sum(nbytes) or work[i] * most >= sum(work), (i, nbytes, work)


def test_small_gradients_go_as_one_message():
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 10])
        entries = [_Entry(_variable(f"w{i}", [10, 10])) for i in range(5)]
        for e in entries:
            x = tf.matmul(x, e.local)
        split = buckets.push_buckets(entries, 3)
        assert [len(b) for b in split] == [5]
