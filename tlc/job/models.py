"""Models in raw tf.compat.v1 ops (graph mode, NHWC): a small CNN for
Fashion-MNIST and the CIFAR ResNets of He et al. 2016 (section 4.2).

Every variable comes from tf.compat.v1.get_variable with an explicit
initializer, so a variable_creator_scope (tlc.replica.local_copies) sees each
one, and building a model twice under reuse (training and evaluation graphs)
shares them. `training` is a Python bool: it picks batch statistics (and
moving-average updates in the UPDATE_OPS collection) or the moving averages.
"""
import tensorflow as tf

v1 = tf.compat.v1

KERNELS = "tlc_model_kernels"  # collection of conv/dense kernels, for weight decay
BN_DECAY = 0.9
BN_EPSILON = 1e-5


def _add_once(collection, var):
    # Building again under reuse returns the same variable: keep one entry.
    if all(v is not var for v in v1.get_collection(collection)):
        v1.add_to_collection(collection, var)


def _conv(x, filters, size, stride=1, name="conv"):
    with v1.variable_scope(name):
        w = v1.get_variable("w", [size, size, x.shape[-1], filters],
                            initializer=v1.initializers.he_normal())
        _add_once(KERNELS, w)
        return tf.nn.conv2d(x, w, strides=stride, padding="SAME")


def _dense(x, units, name):
    with v1.variable_scope(name):
        w = v1.get_variable("w", [x.shape[-1], units], initializer=v1.initializers.he_normal())
        b = v1.get_variable("b", [units], initializer=v1.zeros_initializer())
        _add_once(KERNELS, w)
        return tf.matmul(x, w) + b


def small_cnn(images, num_classes, training):
    """conv5x5-32, relu, maxpool2, conv5x5-64, relu, maxpool2, dense 512, relu, dense."""
    del training  # no dropout or batch norm
    x = tf.nn.relu(_conv(images, 32, 5, name="conv1"))
    x = tf.nn.max_pool2d(x, 2, 2, "SAME")
    x = tf.nn.relu(_conv(x, 64, 5, name="conv2"))
    x = tf.nn.max_pool2d(x, 2, 2, "SAME")
    x = tf.reshape(x, [-1, x.shape[1] * x.shape[2] * x.shape[3]])
    x = tf.nn.relu(_dense(x, 512, "fc1"))
    return _dense(x, num_classes, "logits")


def mlp(images, num_classes, training):
    """784-512-512-10 on Fashion-MNIST: flatten, dense 512, relu, dense 512, relu, dense."""
    del training
    x = tf.reshape(images, [-1, images.shape[1] * images.shape[2] * images.shape[3]])
    x = tf.nn.relu(_dense(x, 512, "fc1"))
    x = tf.nn.relu(_dense(x, 512, "fc2"))
    return _dense(x, num_classes, "logits")


def batch_norm(x, training, name, decay=BN_DECAY):
    """Batch norm over N, H, W with plain variables: trainable gamma and beta,
    non-trainable moving mean and variance updated through UPDATE_OPS.

    All four are [channels] vectors, well under any compression threshold.
    """
    with v1.variable_scope(name):
        channels = x.shape[-1]
        gamma = v1.get_variable("gamma", [channels], initializer=v1.ones_initializer())
        beta = v1.get_variable("beta", [channels], initializer=v1.zeros_initializer())
        # ON_READ, as tf_keras makes them: each replica keeps its own (under
        # tlc.replica.local_copies, a worker-local copy; no per-step traffic).
        stat = dict(trainable=False, synchronization=v1.VariableSynchronization.ON_READ,
                    aggregation=v1.VariableAggregation.MEAN)
        moving_mean = v1.get_variable("moving_mean", [channels],
                                      initializer=v1.zeros_initializer(), **stat)
        moving_variance = v1.get_variable("moving_variance", [channels],
                                          initializer=v1.ones_initializer(), **stat)
        if not training:
            y, _, _ = v1.nn.fused_batch_norm(x, gamma, beta, moving_mean, moving_variance,
                                             epsilon=BN_EPSILON, is_training=False)
            return y
        # The fused kernel is ~30% faster per ResNet-20 step on CPU than tf.nn.moments.
        y, mean, variance = v1.nn.fused_batch_norm(x, gamma, beta, epsilon=BN_EPSILON,
                                                   is_training=True)
        v1.add_to_collection(v1.GraphKeys.UPDATE_OPS, v1.assign_sub(
            moving_mean, (1 - decay) * (moving_mean - mean), name="update_mean"))
        v1.add_to_collection(v1.GraphKeys.UPDATE_OPS, v1.assign_sub(
            moving_variance, (1 - decay) * (moving_variance - variance), name="update_variance"))
        return y


def resnet(images, depth, num_classes, training):
    """CIFAR ResNet: conv3x3-16, then 3 stages of (depth - 2) / 6 basic blocks
    with 16, 32, 64 filters (stride 2 entering stages 2 and 3), global average
    pooling, dense. Shortcuts are identities, with option A (subsample and
    zero-pad channels, no parameters) where the shape changes."""
    if depth < 8 or (depth - 2) % 6:
        raise ValueError(f"CIFAR ResNet depth must be 6n + 2 with n >= 1 (20, 32, 110, ...), "
                         f"got {depth}")
    blocks = (depth - 2) // 6
    x = tf.nn.relu(batch_norm(_conv(images, 16, 3, name="conv0"), training, "bn0"))
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            with v1.variable_scope(f"stage{stage}_block{block}"):
                y = tf.nn.relu(batch_norm(_conv(x, filters, 3, stride, "conv1"), training, "bn1"))
                y = batch_norm(_conv(y, filters, 3, name="conv2"), training, "bn2")
                if stride != 1 or x.shape[-1] != filters:
                    x = x[:, ::stride, ::stride, :]
                    pad = filters - x.shape[-1]
                    x = tf.pad(x, [[0, 0], [0, 0], [0, 0], [pad // 2, pad - pad // 2]])
                x = tf.nn.relu(x + y)
    x = tf.reduce_mean(x, [1, 2])
    return _dense(x, num_classes, "logits")


def _resnet(depth):
    return lambda images, num_classes, training: resnet(images, depth, num_classes, training)


MODELS = {
    "small_cnn": small_cnn,
    "mlp": mlp,
    "resnet20": _resnet(20),
    "resnet32": _resnet(32),
    "resnet110": _resnet(110),
}


def build(name, images, num_classes, training):
    """Logits [batch, num_classes] of model `name` on NHWC float32 `images`."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    if images.shape.rank != 4 or None in images.shape[1:]:
        raise ValueError(f"images must be NHWC with known H, W, C, got shape {images.shape}")
    if images.dtype != tf.float32:
        raise ValueError(f"images must be float32, got {images.dtype.name}")
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    if not isinstance(training, bool):
        raise ValueError(f"training must be a Python bool, got {training!r}")
    return MODELS[name](images, num_classes, training)


def num_parameters(variables=None):
    """Total elements of `variables` (default: the graph's trainable variables)."""
    variables = v1.trainable_variables() if variables is None else variables
    return sum(v.shape.num_elements() for v in variables)


def weight_decay(scale):
    """scale * sum of ||w||^2 / 2 over the conv and dense kernels built so far
    (not biases or batch-norm parameters), as He et al. use (1e-4)."""
    kernels = v1.get_collection(KERNELS)
    if not scale or not kernels:
        return tf.constant(0.0)
    return scale * tf.add_n([tf.nn.l2_loss(w) for w in kernels])


def correct_count(logits, labels):
    """int64 count of examples whose top logit is the label."""
    return tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, 1), labels), tf.int64))


def loss_and_accuracy(logits, labels, weight_decay_scale=0.0):
    """(mean cross-entropy [+ weight decay], batch accuracy) for int64 labels."""
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                         logits=logits))
    if weight_decay_scale:
        loss += weight_decay(weight_decay_scale)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), labels), tf.float32))
    return loss, accuracy
