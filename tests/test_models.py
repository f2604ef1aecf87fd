"""The models: parameter counts, shapes, variable creation through get_variable,
batch norm semantics, and that a few SGD steps lower the loss (one process)."""
import numpy as np
import pytest
import tensorflow as tf

from tlc.job import models

pytestmark = pytest.mark.unit

v1 = tf.compat.v1

SHAPES = {"small_cnn": (28, 28, 1), "mlp": (28, 28, 1), "resnet20": (32, 32, 3), "resnet32": (32, 32, 3),
          "resnet110": (32, 32, 3)}


def resnet_counts(depth, classes=10):
    """(trainable, batch-norm layers) of a CIFAR ResNet, counted by hand."""
    n = (depth - 2) // 6
    params, bn_layers, c_in = 3 * 3 * 3 * 16 + 2 * 16, 1, 16
    for filters in (16, 32, 64):
        for _ in range(n):
            params += 9 * c_in * filters + 9 * filters * filters + 4 * filters  # 2 convs, 2 BNs
            bn_layers, c_in = bn_layers + 2, filters
    return params + 64 * classes + classes, bn_layers


SMALL_CNN_PARAMS = 5 * 5 * 1 * 32 + 5 * 5 * 32 * 64 + 7 * 7 * 64 * 512 + 512 + 512 * 10 + 10
MLP_PARAMS = 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10  # 784-512-512-10


def build_graph(name, num_classes=10, training=True):
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        images = v1.placeholder(tf.float32, (None,) + SHAPES[name])
        logits = models.build(name, images, num_classes, training=training)
    return graph, images, logits


@pytest.mark.parametrize("name, params", [("small_cnn", SMALL_CNN_PARAMS), ("mlp", MLP_PARAMS),
                                          ("resnet20", 269_722), ("resnet32", 464_154),
                                          ("resnet110", 1_727_962)])
def test_parameter_counts(name, params):
    graph, _, logits = build_graph(name)
    with graph.as_default():
        assert models.num_parameters() == params
        non_trainable = [v for v in v1.global_variables() if v not in v1.trainable_variables()]
        updates = v1.get_collection(v1.GraphKeys.UPDATE_OPS)
    assert logits.shape.as_list() == [None, 10]
    if name.startswith("resnet"):
        trainable, bn_layers = resnet_counts(int(name[6:]))
        assert trainable == params  # the figures above are He et al.'s architecture
        assert len(non_trainable) == len(updates) == 2 * bn_layers
        assert all(v.shape.rank == 1 and v.shape[0] <= 64 for v in non_trainable)
    else:
        assert not non_trainable and not updates
    assert params == pytest.approx({"small_cnn": 1.66e6, "mlp": 0.67e6, "resnet20": 0.27e6, "resnet32": 0.46e6,
                                    "resnet110": 1.7e6}[name], rel=0.02)


@pytest.mark.parametrize("name", ["small_cnn", "resnet20"])
def test_output_shapes_and_eval_graph_shares_variables(name):
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        images = v1.placeholder(tf.float32, (None,) + SHAPES[name])
        with v1.variable_scope("model", reuse=v1.AUTO_REUSE):
            train_logits = models.build(name, images, 7, training=True)
            count = len(v1.global_variables())
            updates = len(v1.get_collection(v1.GraphKeys.UPDATE_OPS))
            eval_logits = models.build(name, images, 7, training=False)
        assert len(v1.global_variables()) == count  # nothing new
        assert len(v1.get_collection(v1.GraphKeys.UPDATE_OPS)) == updates  # eval updates nothing
        assert all(v.op.name.startswith("model/") for v in v1.global_variables())
        init = v1.global_variables_initializer()
    batch = np.random.default_rng(0).random((3,) + SHAPES[name]).astype(np.float32)
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        a, b = sess.run([train_logits, eval_logits], {images: batch})
    assert a.shape == b.shape == (3, 7) and np.isfinite(a).all() and np.isfinite(b).all()


def test_every_variable_goes_through_a_creator_scope():
    """What tlc.replica relies on: it can intercept each variable as it is made."""
    seen = []

    def creator(next_creator, **kwargs):
        seen.append((kwargs["name"], kwargs.get("trainable")))
        return next_creator(**kwargs)

    graph = tf.Graph()
    with graph.as_default(), v1.variable_creator_scope(creator):
        models.build("resnet20", v1.placeholder(tf.float32, (None, 32, 32, 3)), 10, True)
        names = sorted(v.op.name for v in v1.global_variables())
        kernels = v1.get_collection(models.KERNELS)
    assert sorted(name for name, _ in seen) == names
    assert len(names) == 19 * 4 + 19 + 2  # BN layers, convs, dense w and b
    assert {name.rsplit("/", 1)[1] for name, trainable in seen if trainable is False} == \
        {"moving_mean", "moving_variance"}
    assert len(kernels) == 20  # 19 convs and the dense layer: weight decay's targets


def test_batch_norm_training_and_inference():
    x = np.random.default_rng(1).normal(3.0, 2.0, (8, 4, 4, 5)).astype(np.float32)
    graph = tf.Graph()
    with graph.as_default():
        images = tf.constant(x)
        with v1.variable_scope("bn", reuse=v1.AUTO_REUSE):
            trained = models.batch_norm(images, True, "layer")
            inferred = models.batch_norm(images, False, "layer")
        updates = v1.get_collection(v1.GraphKeys.UPDATE_OPS)
        mean, variance = [v for v in v1.global_variables() if "moving" in v.op.name]
        init = v1.global_variables_initializer()
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        y = sess.run(trained)
        np.testing.assert_allclose(y.mean((0, 1, 2)), 0, atol=1e-5)
        np.testing.assert_allclose(y.var((0, 1, 2)), 1, atol=1e-3)
        # Inference reads the moving averages (initially mean 0, variance 1).
        np.testing.assert_allclose(sess.run(inferred), x / np.sqrt(1 + 1e-5), rtol=1e-5)
        sess.run(updates)
        np.testing.assert_allclose(sess.run(mean), 0.1 * x.mean((0, 1, 2)), rtol=1e-4)
        n = x[..., 0].size  # the moving variance takes the unbiased batch variance
        np.testing.assert_allclose(sess.run(variance), 0.9 + 0.1 * x.var((0, 1, 2)) * n / (n - 1),
                                   rtol=1e-4)
        moved = sess.run(inferred)
    expected = (x - 0.1 * x.mean((0, 1, 2))) / np.sqrt(0.9 + 0.1 * x.var((0, 1, 2)) * n / (n - 1)
                                                       + 1e-5)
    np.testing.assert_allclose(moved, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, steps, learning_rate", [("small_cnn", 25, 0.02),
                                                        ("resnet20", 25, 0.05)])
def test_sgd_steps_lower_the_loss(name, steps, learning_rate):
    rng = np.random.default_rng(2)
    x = rng.random((16,) + SHAPES[name]).astype(np.float32)
    y = rng.integers(0, 10, 16)
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        with v1.variable_scope("m", reuse=v1.AUTO_REUSE):
            logits = models.build(name, tf.constant(x), 10, training=True)
            eval_logits = models.build(name, tf.constant(x), 10, training=False)
        loss, accuracy = models.loss_and_accuracy(logits, tf.constant(y), weight_decay_scale=1e-4)
        minimize = v1.train.MomentumOptimizer(learning_rate, 0.9).minimize(loss)
        train = tf.group(minimize, *v1.get_collection(v1.GraphKeys.UPDATE_OPS))
        init = v1.global_variables_initializer()
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        first = sess.run(loss)
        for _ in range(steps):
            sess.run(train)
        last, acc = sess.run([loss, accuracy])
        assert np.isfinite(sess.run(eval_logits)).all()
    assert last < 0.5 * first and acc > 0.5, (first, last, acc)


def test_loss_accuracy_and_weight_decay_values():
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0], [1.0, 4.0, 0.0], [0.0, 0.0, 1.0]],
                      np.float32)
    labels = np.array([0, 2, 0, 1])
    log_softmax = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    expected = -log_softmax[np.arange(4), labels].mean()
    graph = tf.Graph()
    with graph.as_default():
        loss, accuracy = models.loss_and_accuracy(tf.constant(logits), tf.constant(labels))
        correct = models.correct_count(tf.constant(logits), tf.constant(labels))
        models.build("small_cnn", v1.placeholder(tf.float32, (None, 28, 28, 1)), 10, True)
        decay = models.weight_decay(1e-3)
        decayed, _ = models.loss_and_accuracy(tf.constant(logits), tf.constant(labels), 1e-3)
        kernels = v1.get_collection(models.KERNELS)
        init = v1.global_variables_initializer()
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        values = sess.run([loss, accuracy, correct, decay, decayed, kernels])
    assert values[0] == pytest.approx(expected, rel=1e-5)
    assert values[1] == 0.5 and values[2] == 2
    assert [k.shape.as_list() for k in kernels] == [[5, 5, 1, 32], [5, 5, 32, 64],
                                                   [3136, 512], [512, 10]]
    l2 = 1e-3 * sum(0.5 * (k.astype(np.float64) ** 2).sum() for k in values[5])
    assert values[3] == pytest.approx(l2, rel=1e-4) and values[3] > 0
    assert values[4] == pytest.approx(expected + l2, rel=1e-4)


def test_bad_arguments():
    images = None  # the name and depth are checked before anything is built
    with pytest.raises(ValueError, match="unknown model 'vgg'; known: mlp, resnet110"):
        models.build("vgg", images, 10, True)
    with pytest.raises(ValueError, match="6n \\+ 2"):
        models.resnet(images, 21, 10, True)
    with pytest.raises(ValueError, match="6n \\+ 2"):
        models.resnet(images, 2, 10, True)
    with tf.Graph().as_default():
        flat = v1.placeholder(tf.float32, (None, 784))
        with pytest.raises(ValueError, match="NHWC"):
            models.build("small_cnn", flat, 10, True)
        with pytest.raises(ValueError, match="NHWC"):
            models.build("small_cnn", v1.placeholder(tf.float32, (None, None, 28, 1)), 10, True)
        with pytest.raises(ValueError, match="float32"):
            models.build("small_cnn", v1.placeholder(tf.uint8, (None, 28, 28, 1)), 10, True)
        good = v1.placeholder(tf.float32, (None, 28, 28, 1))
        with pytest.raises(ValueError, match="num_classes"):
            models.build("small_cnn", good, 1, True)
        with pytest.raises(ValueError, match="training must be a Python bool"):
            models.build("small_cnn", good, 10, tf.constant(True))
        assert not v1.global_variables()  # nothing half-built
