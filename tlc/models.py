"""Models in raw tf.compat.v1 ops, so that tlc.replica can intercept every
variable: a small CNN for Fashion-MNIST and CIFAR ResNets (He et al. 2016)."""
import tensorflow as tf

v1 = tf.compat.v1


def _conv(x, filters, size, stride=1, name="conv"):
    with v1.variable_scope(name):
        w = v1.get_variable("w", [size, size, x.shape[-1], filters],
                            initializer=v1.initializers.he_normal())
        return tf.nn.conv2d(x, w, strides=stride, padding="SAME")


def _dense(x, units, name):
    with v1.variable_scope(name):
        w = v1.get_variable("w", [x.shape[-1], units], initializer=v1.initializers.he_normal())
        b = v1.get_variable("b", [units], initializer=v1.zeros_initializer())
        return tf.matmul(x, w) + b


def small_cnn(images, num_classes, training):
    del training
    x = tf.nn.relu(_conv(images, 32, 5, name="conv1"))
    x = tf.nn.max_pool2d(x, 2, 2, "SAME")
    x = tf.nn.relu(_conv(x, 64, 5, name="conv2"))
    x = tf.nn.max_pool2d(x, 2, 2, "SAME")
    x = tf.reshape(x, [-1, x.shape[1] * x.shape[2] * x.shape[3]])
    x = tf.nn.relu(_dense(x, 512, "fc1"))
    return _dense(x, num_classes, "logits")


def _batch_norm(x, training, name, decay=0.9):
    """Batch norm with plain variables; moving statistics update via UPDATE_OPS."""
    with v1.variable_scope(name):
        channels = x.shape[-1]
        gamma = v1.get_variable("gamma", [channels], initializer=v1.ones_initializer())
        beta = v1.get_variable("beta", [channels], initializer=v1.zeros_initializer())
        mean_avg = v1.get_variable("moving_mean", [channels], trainable=False,
                                   initializer=v1.zeros_initializer())
        var_avg = v1.get_variable("moving_variance", [channels], trainable=False,
                                  initializer=v1.ones_initializer())
        if training:
            mean, variance = tf.nn.moments(x, [0, 1, 2])
            v1.add_to_collection(v1.GraphKeys.UPDATE_OPS,
                                 mean_avg.assign(decay * mean_avg + (1 - decay) * mean))
            v1.add_to_collection(v1.GraphKeys.UPDATE_OPS,
                                 var_avg.assign(decay * var_avg + (1 - decay) * variance))
        else:
            mean, variance = mean_avg, var_avg
        return tf.nn.batch_normalization(x, mean, variance, beta, gamma, 1e-5)


def resnet(images, depth, num_classes, training):
    if (depth - 2) % 6:
        raise ValueError(f"CIFAR ResNet depth must be 6n + 2, got {depth}")
    blocks = (depth - 2) // 6
    x = tf.nn.relu(_batch_norm(_conv(images, 16, 3, name="conv0"), training, "bn0"))
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            with v1.variable_scope(f"stage{stage}_block{block}"):
                y = tf.nn.relu(_batch_norm(_conv(x, filters, 3, stride, "conv1"), training, "bn1"))
                y = _batch_norm(_conv(y, filters, 3, name="conv2"), training, "bn2")
                if stride != 1 or x.shape[-1] != filters:
                    # Option A shortcut: subsample and zero-pad channels (no parameters).
                    x = x[:, ::stride, ::stride, :]
                    pad = filters - x.shape[-1]
                    x = tf.pad(x, [[0, 0], [0, 0], [0, 0], [pad // 2, pad - pad // 2]])
                x = tf.nn.relu(x + y)
    x = tf.reduce_mean(x, [1, 2])
    return _dense(x, num_classes, "logits")


MODELS = {
    "small_cnn": small_cnn,
    "resnet20": lambda x, c, t: resnet(x, 20, c, t),
    "resnet32": lambda x, c, t: resnet(x, 32, c, t),
    "resnet110": lambda x, c, t: resnet(x, 110, c, t),
}


def build(name, images, num_classes, training):
    """Logits of model `name`; variables come from tf.compat.v1.get_variable."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[name](images, num_classes, training)
