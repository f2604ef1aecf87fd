"""Dataset readers on files written in the real formats, and the models."""
import gzip
import os
import struct

import numpy as np
import pytest
import tensorflow as tf

from tlc import data, models


def write_idx(path, array, compress=True):
    header = struct.pack(">HBB", 0, 0x08, array.ndim) + struct.pack(">" + "I" * array.ndim,
                                                                     *array.shape)
    raw = header + array.astype(np.uint8).tobytes()
    with open(path, "wb") as f:
        f.write(gzip.compress(raw) if compress else raw)


def fake_fashion_mnist(root, n_train=50, n_test=20, compress=True):
    rng = np.random.default_rng(0)
    suffix = ".gz" if compress else ""
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        write_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte{suffix}"),
                  rng.integers(0, 256, (n, 28, 28)), compress)
        write_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte{suffix}"),
                  rng.integers(0, 10, n), compress)


@pytest.mark.parametrize("compress", [True, False])
def test_fashion_mnist_reader(tmp_path, compress):
    fake_fashion_mnist(tmp_path, compress=compress)
    ds = data.load("fashion_mnist", str(tmp_path))
    assert ds.train_x.shape == (50, 28, 28, 1) and ds.test_y.shape == (20,)
    assert ds.train_x.dtype == np.float32 and 0 <= ds.train_x.min() and ds.train_x.max() <= 1


def test_real_fashion_mnist_when_installed():
    if not os.path.isdir(data.FASHION_MNIST_DIR):
        pytest.skip("Debian package dataset-fashion-mnist not installed")
    ds = data.load("fashion_mnist")
    assert ds.train_x.shape == (60000, 28, 28, 1) and ds.test_x.shape == (10000, 28, 28, 1)
    assert set(np.unique(ds.train_y)) == set(range(10))


def test_fashion_mnist_errors(tmp_path):
    with pytest.raises(data.DatasetError, match="dataset-fashion-mnist"):
        data.load("fashion_mnist", str(tmp_path / "missing"))
    fake_fashion_mnist(tmp_path)
    path = tmp_path / "train-labels-idx1-ubyte.gz"
    path.write_bytes(gzip.compress(gzip.decompress(path.read_bytes())[:-3]))  # truncated
    with pytest.raises(data.DatasetError, match="header says"):
        data.load("fashion_mnist", str(tmp_path))
    (tmp_path / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00\x0d\x01"))
    with pytest.raises(data.DatasetError, match="unsigned-byte IDX"):
        data.load("fashion_mnist", str(tmp_path))
    with pytest.raises(data.DatasetError, match="unknown dataset"):
        data.load("mnist2")


def write_cifar(path, labels, rng):
    records = np.concatenate([np.array(labels, np.uint8)[:, None],
                              rng.integers(0, 256, (len(labels), 3072), dtype=np.uint8)], 1)
    records.tofile(path)
    return records


def test_cifar10_reader(tmp_path):
    rng = np.random.default_rng(1)
    first = None
    for i in range(1, 6):
        records = write_cifar(tmp_path / f"data_batch_{i}.bin", [i % 10, 3], rng)
        first = records if first is None else first
    write_cifar(tmp_path / "test_batch.bin", [7], rng)
    ds = data.load("cifar10", str(tmp_path))
    assert ds.train_x.shape == (10, 32, 32, 3) and ds.test_y.tolist() == [7]
    # CHW bytes become NHWC: red plane first, pixel (0, 0).
    red = (first[0, 1] / 255.0 - data.CIFAR_MEAN[0]) / data.CIFAR_STD[0]
    assert np.isclose(ds.train_x[0, 0, 0, 0], red)
    (tmp_path / "test_batch.bin").write_bytes(b"\x01" * 100)
    with pytest.raises(data.DatasetError, match="whole number"):
        data.load("cifar10", str(tmp_path))


def test_batcher_is_seeded_per_worker():
    x, y = np.arange(100, dtype=np.float32)[:, None], np.arange(100)
    a, b = data.Batcher(x, y, 10, seed=0), data.Batcher(x, y, 10, seed=1)
    seen = np.concatenate([a.next()[1] for _ in range(10)])
    assert sorted(seen.tolist()) == list(range(100))  # an epoch covers every example once
    assert not np.array_equal(data.Batcher(x, y, 10, seed=0).next()[1], b.next()[1])
    with pytest.raises(ValueError):
        data.Batcher(x, y, 0)


@pytest.mark.parametrize("name, params", [("small_cnn", 800 + 51_200 + 3136 * 512 + 512 + 5130),
                                          ("resnet20", 269_722), ("resnet110", 1_727_962),
                                          ("resnet32", 464_154)])
def test_models_build_with_expected_parameters(name, params):
    graph = tf.Graph()
    with graph.as_default():
        shape = (None, 28, 28, 1) if name == "small_cnn" else (None, 32, 32, 3)
        images = tf.compat.v1.placeholder(tf.float32, shape)
        logits = models.build(name, images, 10, training=True)
        count = sum(v.shape.num_elements() for v in tf.compat.v1.trainable_variables())
    assert logits.shape.as_list() == [None, 10]
    assert count == params


def test_small_cnn_learns_a_batch():
    rng = np.random.default_rng(2)
    x = rng.random((32, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, 32)
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(0)
        logits = models.build("small_cnn", tf.constant(x), 10, training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                             logits=logits))
        train = tf.compat.v1.train.MomentumOptimizer(0.02, 0.9).minimize(loss)
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(init)
        first = sess.run(loss)
        for _ in range(30):
            sess.run(train)
        assert sess.run(loss) < 0.5 * first


def test_unknown_model():
    with pytest.raises(ValueError, match="unknown model"):
        models.build("vgg", None, 10, True)
    with pytest.raises(ValueError, match="6n \\+ 2"):
        models.resnet(None, 21, 10, True)
