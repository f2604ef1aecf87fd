"""Dataset readers on small files written in the real formats (and broken
copies of them), the registry, minibatches and the evaluation helper."""
import gzip
import os
import struct

import numpy as np
import pytest
import tensorflow as tf

from tlc.job import data, models

pytestmark = pytest.mark.cluster

FASHION_FILES = [f"{prefix}-{kind}-ubyte" for prefix in ("train", "t10k")
                 for kind in ("images-idx3", "labels-idx1")]


def idx_bytes(array, dtype_code=0x08):
    header = struct.pack(">HBB", 0, dtype_code, array.ndim)
    header += struct.pack(">" + "I" * array.ndim, *array.shape)
    return header + array.astype(np.uint8).tobytes()


def write(path, raw, compress):
    with open(path, "wb") as f:
        f.write(gzip.compress(raw) if compress else raw)


def fake_fashion_mnist(root, n_train=50, n_test=20, compress=True, seed=0):
    """Writes the four IDX files; returns {file stem: uint8 array written}."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        arrays[f"{prefix}-images-idx3-ubyte"] = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        arrays[f"{prefix}-labels-idx1-ubyte"] = rng.integers(0, 10, n, dtype=np.uint8)
    for stem, array in arrays.items():
        write(os.path.join(root, stem + (".gz" if compress else "")), idx_bytes(array), compress)
    return arrays


@pytest.mark.parametrize("compress", [True, False])
def test_fashion_mnist_reads_what_was_written(tmp_path, compress):
    arrays = fake_fashion_mnist(tmp_path, compress=compress)
    train_x, train_y, test_x, test_y = data.load_fashion_mnist(str(tmp_path))
    assert train_x.shape == (50, 28, 28, 1) and test_x.shape == (20, 28, 28, 1)
    assert train_x.dtype == np.float32 and train_y.dtype == np.int64
    np.testing.assert_array_equal(train_x[..., 0] * 255.0,
                                  arrays["train-images-idx3-ubyte"].astype(np.float32))
    np.testing.assert_array_equal(test_y, arrays["t10k-labels-idx1-ubyte"])
    assert train_x.min() >= 0.0 and train_x.max() <= 1.0


def test_fashion_mnist_mixed_compression_and_registry(tmp_path):
    fake_fashion_mnist(tmp_path, compress=True)
    os.remove(tmp_path / "t10k-labels-idx1-ubyte.gz")
    labels = np.arange(20, dtype=np.uint8) % 10
    write(tmp_path / "t10k-labels-idx1-ubyte", idx_bytes(labels), compress=False)
    ds = data.load("fashion_mnist", str(tmp_path))
    assert ds.num_classes == 10 and ds.default_model == "small_cnn" and ds.augment is None
    np.testing.assert_array_equal(ds.test_y, labels)
    data.check_available("fashion_mnist", str(tmp_path))


def corrupt(tmp_path, stem, raw):
    path = tmp_path / (stem + ".gz")
    path.write_bytes(gzip.compress(raw))


@pytest.mark.parametrize("stem, make, message", [
    ("train-labels-idx1-ubyte", lambda a: idx_bytes(a)[:-3], "header says 50 = 50 bytes"),
    ("train-labels-idx1-ubyte", lambda a: idx_bytes(a) + b"\0", "file has 51"),
    ("train-labels-idx1-ubyte", lambda a: b"\x00\x00\x08", "ends inside the IDX header"),
    ("train-labels-idx1-ubyte", lambda a: b"\x00\x00\x08\x01\x00", "ends inside the IDX header"),
    ("train-labels-idx1-ubyte", lambda a: idx_bytes(a, 0x0d), "magic number 0x00000d01"),
    ("train-labels-idx1-ubyte", lambda a: idx_bytes(a[:, None]), "with 1 dimensions"),
    ("train-images-idx3-ubyte", lambda a: b"\x01" + idx_bytes(a)[1:], "magic number"),
    ("train-images-idx3-ubyte", lambda a: idx_bytes(a[:, :27]), "27x28"),
    ("train-images-idx3-ubyte", lambda a: idx_bytes(a[:49]), "49 train images but 50 labels"),
    ("t10k-labels-idx1-ubyte", lambda a: idx_bytes(a + 1), "label 10 outside 0..9"),
])
def test_fashion_mnist_malformed_files(tmp_path, stem, make, message):
    arrays = fake_fashion_mnist(tmp_path)
    corrupt(tmp_path, stem, make(arrays[stem]))
    with pytest.raises(data.DatasetError, match=message):
        data.load_fashion_mnist(str(tmp_path))


def test_fashion_mnist_corrupt_gzip(tmp_path):
    fake_fashion_mnist(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    good = path.read_bytes()
    path.write_bytes(good[:len(good) // 2])  # gzip stream cut short
    with pytest.raises(data.DatasetError, match="corrupt gzip"):
        data.load_fashion_mnist(str(tmp_path))
    path.write_bytes(good[:-8] + bytes(8))  # wrong CRC and length trailer
    with pytest.raises(data.DatasetError, match="corrupt gzip"):
        data.load_fashion_mnist(str(tmp_path))
    # The launcher's check before any task starts finds it too (headers are fine).
    with pytest.raises(data.DatasetError, match="corrupt gzip"):
        data.check_available("fashion_mnist", str(tmp_path))


def test_fashion_mnist_missing(tmp_path):
    with pytest.raises(data.DatasetError, match="dataset-fashion-mnist") as info:
        data.load_fashion_mnist(str(tmp_path / "nowhere"))
    assert isinstance(info.value, ValueError) and "nowhere" in str(info.value)
    with pytest.raises(data.DatasetError, match="dataset-fashion-mnist"):
        data.check_available("fashion_mnist", str(tmp_path / "nowhere"))
    fake_fashion_mnist(tmp_path)
    os.remove(tmp_path / "t10k-images-idx3-ubyte.gz")
    with pytest.raises(data.DatasetError, match="missing file .*t10k-images-idx3-ubyte"):
        data.load_fashion_mnist(str(tmp_path))
    with pytest.raises(data.DatasetError, match="t10k-images-idx3-ubyte"):
        data.check_available("fashion_mnist", str(tmp_path))


def test_check_available_reads_headers(tmp_path):
    arrays = fake_fashion_mnist(tmp_path)
    corrupt(tmp_path, "t10k-labels-idx1-ubyte", idx_bytes(arrays["t10k-labels-idx1-ubyte"][:5]))
    with pytest.raises(data.DatasetError, match="20 test images but 5 labels"):
        data.check_available("fashion_mnist", str(tmp_path))
    corrupt(tmp_path, "t10k-labels-idx1-ubyte", idx_bytes(arrays["t10k-images-idx3-ubyte"]))
    with pytest.raises(data.DatasetError, match="magic number"):
        data.check_available("fashion_mnist", str(tmp_path))


def test_real_fashion_mnist_when_installed():
    if not os.path.isdir(data.FASHION_MNIST_DIR):
        pytest.skip("Debian package dataset-fashion-mnist not installed")
    data.check_available("fashion_mnist")
    train_x, train_y, test_x, test_y = data.load("fashion_mnist")
    assert train_x.shape == (60000, 28, 28, 1) and test_x.shape == (10000, 28, 28, 1)
    assert train_y.shape == (60000,) and test_y.shape == (10000,)
    assert train_x.dtype == np.float32 and test_y.dtype == np.int64
    assert train_x.min() == 0.0 and train_x.max() == 1.0
    # Fashion-MNIST is balanced: 6000 training and 1000 test images per class.
    assert np.bincount(train_y).tolist() == [6000] * 10
    assert np.bincount(test_y).tolist() == [1000] * 10


def write_cifar(path, labels, rng):
    records = np.concatenate([np.array(labels, np.uint8)[:, None],
                              rng.integers(0, 256, (len(labels), 3072), dtype=np.uint8)], 1)
    records.tofile(path)
    return records


def fake_cifar(root, per_batch=2, seed=1):
    rng = np.random.default_rng(seed)
    train = [write_cifar(root / name, rng.integers(0, 10, per_batch), rng)
             for name in data.CIFAR_TRAIN_FILES]
    test = write_cifar(root / data.CIFAR_TEST_FILE, [9, 0, 4], rng)
    return np.concatenate(train), test


def test_cifar10_reads_chw_records_as_normalised_nhwc(tmp_path):
    train, test = fake_cifar(tmp_path)
    ds = data.load("cifar10", str(tmp_path))
    assert ds.train_x.shape == (10, 32, 32, 3) and ds.test_x.shape == (3, 32, 32, 3)
    assert ds.train_x.dtype == np.float32 and ds.train_y.dtype == np.int64
    assert ds.default_model == "resnet20" and ds.augment == "crop_flip"
    np.testing.assert_array_equal(ds.train_y, train[:, 0])
    assert ds.test_y.tolist() == [9, 0, 4]
    # Byte 1 + c*1024 + r*32 + col holds channel c of pixel (r, col).
    for records, images in ((train, ds.train_x), (test, ds.test_x)):
        chw = records[:, 1:].reshape(-1, 3, 32, 32).astype(np.float64) / 255.0
        expected = (chw.transpose(0, 2, 3, 1) - data.CIFAR_MEAN) / data.CIFAR_STD
        np.testing.assert_allclose(images, expected, rtol=1e-5, atol=1e-5)
    r, c = 5, 17
    assert np.isclose(ds.train_x[3, r, c, 2], (train[3, 1 + 2048 + r * 32 + c] / 255.0
                                               - data.CIFAR_MEAN[2]) / data.CIFAR_STD[2])
    images, labels = data.read_cifar_batch(str(tmp_path / data.CIFAR_TEST_FILE))
    np.testing.assert_array_equal(images, ds.test_x)
    np.testing.assert_array_equal(labels, ds.test_y)
    data.check_available("cifar10", str(tmp_path))


@pytest.mark.parametrize("content, message", [
    (b"\x01" * 100, "100 bytes is not a whole number of 3073-byte records"),
    (b"\x01" * 3074, "3074 bytes"),
    (b"", "0 bytes"),
    (b"\x0a" + b"\x00" * 3072, "label 10 outside 0..9"),
])
def test_cifar10_malformed_batch(tmp_path, content, message):
    fake_cifar(tmp_path)
    (tmp_path / "data_batch_3.bin").write_bytes(content)
    with pytest.raises(data.DatasetError, match=message):
        data.load_cifar10(str(tmp_path))
    with pytest.raises(data.DatasetError, match=message):  # labels too, before any task
        data.check_available("cifar10", str(tmp_path))


def test_cifar10_missing(tmp_path):
    with pytest.raises(data.DatasetError, match="data_batch_1.bin") as info:
        data.load_cifar10(str(tmp_path / "nowhere"))
    assert "nowhere" in str(info.value)
    fake_cifar(tmp_path)
    os.remove(tmp_path / "data_batch_4.bin")
    os.remove(tmp_path / "test_batch.bin")
    with pytest.raises(data.DatasetError, match="missing data_batch_4.bin, test_batch.bin"):
        data.load("cifar10", str(tmp_path))
    with pytest.raises(data.DatasetError, match="missing data_batch_4.bin"):
        data.check_available("cifar10", str(tmp_path))


def test_registry():
    assert set(data.DATASETS) == {"fashion_mnist", "cifar10"}
    assert data.info("fashion_mnist").default_model == "small_cnn"
    assert data.info("cifar10").default_model == "resnet20"
    for entry in data.DATASETS.values():
        assert entry.default_model in models.MODELS and entry.num_classes == 10
    assert data.info("cifar10").image_shape == (32, 32, 3)
    with pytest.raises(data.DatasetError, match="unknown dataset 'mnist2'; known: cifar10, "):
        data.load("mnist2")
    with pytest.raises(data.DatasetError, match="unknown dataset"):
        data.check_available("imagenet")


def test_batcher_epochs_and_pairs():
    x = np.arange(103, dtype=np.float32)[:, None] * 2
    y = np.arange(103)
    batcher = data.Batcher(x, y, 10, seed=0)
    epoch = []
    for _ in range(10):
        bx, by = batcher.next()
        assert bx.shape == (10, 1) and by.shape == (10,)
        np.testing.assert_array_equal(bx[:, 0], 2 * by)  # images stay with their labels
        epoch += by.tolist()
    assert len(set(epoch)) == 100 and batcher.epoch == 0  # no example twice within an epoch
    bx, by = next(batcher)
    assert batcher.epoch == 1 and len(by) == 10
    # Over many epochs the 3 examples left out of each are not always the same.
    seen = np.zeros(103, bool)
    for _, (_, by) in zip(range(50), batcher):
        seen[by] = True
    assert seen.all()


def test_batcher_seeds_workers_apart():
    x, y = np.zeros((1000, 2), np.float32), np.arange(1000)

    def first_batches(batcher):
        return np.concatenate([batcher.next()[1] for _ in range(5)])

    a = first_batches(data.Batcher(x, y, 32, seed=data.worker_seed(7, 0)))
    b = first_batches(data.Batcher(x, y, 32, seed=data.worker_seed(7, 1)))
    again = first_batches(data.Batcher(x, y, 32, seed=data.worker_seed(7, 0)))
    np.testing.assert_array_equal(a, again)  # reproducible per worker
    assert len(np.intersect1d(a, b)) < len(a) // 2  # but different across workers
    ds = data.Dataset(x, y, x, y, 10, "small_cnn")
    np.testing.assert_array_equal(first_batches(ds.batcher(32, worker_index=1, seed=7)), b)


@pytest.mark.parametrize("kwargs, message", [
    (dict(batch_size=0), "batch_size"), (dict(batch_size=11), "batch_size"),
    (dict(batch_size=2.5), "batch_size"), (dict(batch_size=2, augment="mixup"), "augment"),
])
def test_batcher_rejects_bad_arguments(kwargs, message):
    x, y = np.zeros((10, 4, 4, 1), np.float32), np.zeros(10, np.int64)
    with pytest.raises(ValueError, match=message):
        data.Batcher(x, y, **kwargs)
    with pytest.raises(ValueError, match="10 examples but 9 labels"):
        data.Batcher(x, y[:9], 2)
    with pytest.raises(ValueError, match="NHWC"):
        data.Batcher(x[:, :, :, 0], y, 2, augment="crop_flip")


def test_crop_flip_gives_shifted_or_mirrored_crops():
    rng = np.random.default_rng(3)
    images = rng.random((64, 8, 8, 3)).astype(np.float32) + 1  # no zeros: padding is visible
    out = data.crop_flip(images, np.random.default_rng(4), pad=2)
    assert out.shape == images.shape and out.dtype == np.float32
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2), (0, 0)))
    kinds = set()
    for i in range(len(images)):
        matches = [(r, c, flip) for r in range(5) for c in range(5) for flip in (False, True)
                   if np.array_equal(out[i], (lambda p: p[:, ::-1] if flip else p)(
                       padded[i, r:r + 8, c:c + 8]))]
        assert matches, f"output {i} is not a crop of its padded input"
        kinds.add(matches[0][2])
    assert kinds == {False, True}
    assert not np.array_equal(out, images)
    # The Batcher applies it to training batches and keeps labels with images.
    x = np.broadcast_to(np.arange(20, dtype=np.float32)[:, None, None, None] + 1,
                        (20, 8, 8, 1)).copy()
    bx, by = data.Batcher(x, np.arange(20), 20, seed=0, augment="crop_flip").next()
    for image, label in zip(bx, by):
        assert set(np.unique(image)) <= {0.0, label + 1.0}
        assert (image == label + 1).sum() >= (8 - 4) ** 2  # at least the overlap of a crop


def test_evaluate_counts_over_uneven_batches():
    x = np.array([[-1.0], [2.0], [3.0], [-4.0], [5.0], [-6.0], [7.0]], np.float32)
    y = np.array([0, 1, 0, 0, 1, 1, 1], np.int64)  # prediction is x > 0: 5 of 7 right
    graph = tf.Graph()
    with graph.as_default():
        images = tf.compat.v1.placeholder(tf.float32, (None, 1))
        labels = tf.compat.v1.placeholder(tf.int64, (None,))
        logits = tf.concat([-images, images], 1)
        correct = models.correct_count(logits, labels)
    with tf.compat.v1.Session(graph=graph) as sess:
        assert data.evaluate(sess, correct, images, labels, x, y, batch_size=3) == 5 / 7
        assert data.evaluate(sess, correct, images, labels, x, y, batch_size=2, limit=4) == 3 / 4
        assert data.evaluate(sess, correct, images, labels, x, y, limit=100) == 5 / 7
        with pytest.raises(ValueError, match="no examples"):
            data.evaluate(sess, correct, images, labels, x[:0], y[:0])
    assert [len(b) for b, _ in data.in_order(x, y, 3)] == [3, 3, 1]
