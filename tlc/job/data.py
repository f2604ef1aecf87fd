"""Datasets: Fashion-MNIST (IDX files from Debian's dataset-fashion-mnist) and
CIFAR-10 (the standard binary batches), plus per-worker minibatches fed
through feed_dict.

Everything is plain numpy: the arrays are small enough to hold in memory
(Fashion-MNIST 220 MB, CIFAR-10 740 MB as float32), and feeding numpy batches
keeps the training graph free of input pipelines on the parameter servers.
"""
import gzip
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Optional

import numpy as np

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"
CIFAR10_DIR = "data/cifar-10-batches-bin"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"

AUGMENTATIONS = (None, "crop_flip")


class DatasetError(ValueError):
    """A dataset that is missing or malformed."""


@dataclass
class Dataset:
    train_x: np.ndarray  # float32 NHWC
    train_y: np.ndarray  # int64
    test_x: np.ndarray
    test_y: np.ndarray
    num_classes: int
    default_model: str
    augment: Optional[str] = None  # what Batcher should do to training batches

    def __iter__(self):
        """`train_x, train_y, test_x, test_y = dataset` works, as for the loaders' tuples."""
        return iter((self.train_x, self.train_y, self.test_x, self.test_y))

    def batcher(self, batch_size, worker_index=0, seed=0):
        """Training minibatches for one worker, in an order of its own."""
        return Batcher(self.train_x, self.train_y, batch_size, seed=worker_seed(seed, worker_index),
                       augment=self.augment)


# ---------------------------------------------------------------- IDX files

_GZIP_MAGIC = b"\x1f\x8b"
_IDX_UBYTE = 0x08


def _find(path):
    """`path` itself, or its .gz twin (Debian installs the compressed files)."""
    for candidate in (path, path + ".gz"):
        if os.path.isfile(candidate):
            return candidate
    raise DatasetError(f"missing file {path} (or {os.path.basename(path)}.gz)")


def _open(path):
    """A binary stream of the file's contents, gunzipped if it is gzip data."""
    with open(path, "rb") as f:
        compressed = f.read(2) == _GZIP_MAGIC
    # pylint: disable-next=consider-using-with
    return gzip.open(path, "rb") if compressed else open(path, "rb")


def _read_exactly(f, path, count, what):
    try:
        raw = f.read(count)
    except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError
        raise DatasetError(f"{path}: corrupt gzip data ({e})") from e
    if len(raw) != count:
        raise DatasetError(f"{path}: file ends inside the {what} ({len(raw)} of {count} bytes)")
    return raw


def _idx_shape(f, path, ndims):
    """Reads and checks the IDX header: magic 0x0000 08 <ndims>, then ndims big-endian sizes."""
    zero, dtype, dims = struct.unpack(">HBB", _read_exactly(f, path, 4, "IDX header"))
    if zero != 0 or dtype != _IDX_UBYTE or dims != ndims:
        raise DatasetError(f"{path}: magic number 0x{zero:04x}{dtype:02x}{dims:02x} is not that of "
                           f"an unsigned-byte IDX file with {ndims} dimensions "
                           f"(0x0000{_IDX_UBYTE:02x}{ndims:02x})")
    return struct.unpack(">" + "I" * ndims, _read_exactly(f, path, 4 * ndims, "IDX header"))


def read_idx(path, ndims):
    """An unsigned-byte IDX file (optionally gzipped) as a uint8 array of its declared shape."""
    path = _find(path)
    with _open(path) as f:
        shape = _idx_shape(f, path, ndims)
        size = int(np.prod(shape, dtype=np.int64))
        try:
            body = f.read()
        except (OSError, EOFError, zlib.error) as e:
            raise DatasetError(f"{path}: corrupt gzip data ({e})") from e
    if len(body) != size:
        raise DatasetError(f"{path}: header says {'x'.join(map(str, shape))} = {size} bytes of "
                           f"data, file has {len(body)}")
    return np.frombuffer(body, np.uint8).reshape(shape)


def _check_labels(labels, num_classes, where):
    if labels.size and int(labels.max()) >= num_classes:
        raise DatasetError(f"{where}: label {int(labels.max())} outside 0..{num_classes - 1}")


def _fashion_mnist_dir(path):
    path = path or FASHION_MNIST_DIR
    if not os.path.isdir(path):
        raise DatasetError(f"Fashion-MNIST not found: no directory {path}. Install the Debian "
                           f"package {FASHION_MNIST_PACKAGE} (apt-get install "
                           f"{FASHION_MNIST_PACKAGE}) or pass --data_dir")
    return path


_FASHION_SPLITS = (("train", "train"), ("test", "t10k"))


def _read_fashion_mnist(path):
    """[(split, uint8 images [N, 28, 28], uint8 labels [N])], every byte read and checked
    (gzip CRC and length, IDX sizes, label range)."""
    path = _fashion_mnist_dir(path)
    splits = []
    for split, prefix in _FASHION_SPLITS:
        images = read_idx(os.path.join(path, f"{prefix}-images-idx3-ubyte"), 3)
        labels = read_idx(os.path.join(path, f"{prefix}-labels-idx1-ubyte"), 1)
        if images.shape[1:] != (28, 28):
            raise DatasetError(f"{path}: {split} images are {images.shape[1]}x{images.shape[2]}, "
                               "Fashion-MNIST images are 28x28")
        if len(images) != len(labels):
            raise DatasetError(f"{path}: {len(images)} {split} images but {len(labels)} labels")
        _check_labels(labels, 10, f"{path} ({split})")
        splits.append((split, images, labels))
    return splits


def load_fashion_mnist(path=None):
    """(train_x, train_y, test_x, test_y): float32 [N, 28, 28, 1] in [0, 1], int64 labels.

    Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `path`
    (default: where Debian's dataset-fashion-mnist installs them). The result
    is a Dataset, which unpacks as that 4-tuple.
    """
    parts = []
    for _, images, labels in _read_fashion_mnist(path):
        x = images.astype(np.float32)
        x /= 255.0  # in place: no float64 temporary
        parts += [x[..., None], labels.astype(np.int64)]
    return Dataset(*parts, num_classes=10, default_model="small_cnn")


def _check_fashion_mnist(path):
    """Everything load() checks (a second or so): a launcher runs it before starting tasks."""
    _read_fashion_mnist(path)


# ---------------------------------------------------------------- CIFAR-10

CIFAR_RECORD = 1 + 3 * 32 * 32  # label byte, then 1024 red, 1024 green, 1024 blue bytes
CIFAR_TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR_TEST_FILE = "test_batch.bin"
CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32)  # per channel, of the training set
CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], np.float32)


def _cifar_records(path):
    """Number of records in a batch file; checks that it holds whole records."""
    if not os.path.isfile(path):
        raise DatasetError(f"missing CIFAR-10 batch {path}")
    size = os.path.getsize(path)
    if size == 0 or size % CIFAR_RECORD:
        raise DatasetError(f"{path}: {size} bytes is not a whole number of "
                           f"{CIFAR_RECORD}-byte records (1 label byte + 3072 pixel bytes)")
    return size // CIFAR_RECORD


def _read_cifar_into(path, images, labels):
    """Fills images [n, 32, 32, 3] (normalised NHWC) and labels [n] from one batch file."""
    records = np.fromfile(path, np.uint8)
    if records.size != len(images) * CIFAR_RECORD:
        raise DatasetError(f"{path}: changed size while being read")
    records = records.reshape(-1, CIFAR_RECORD)
    _check_labels(records[:, 0], 10, path)
    labels[:] = records[:, 0]
    images[:] = records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    images /= 255.0
    images -= CIFAR_MEAN
    images /= CIFAR_STD


def read_cifar_batch(path):
    """One CIFAR-10 binary batch: float32 [n, 32, 32, 3] normalised per channel, int64 [n]."""
    count = _cifar_records(path)
    images, labels = np.empty((count, 32, 32, 3), np.float32), np.empty(count, np.int64)
    _read_cifar_into(path, images, labels)
    return images, labels


def _read_cifar_files(paths):
    # Sizes first, then one preallocated array: no second copy from concatenation.
    counts = [_cifar_records(p) for p in paths]
    images, labels = np.empty((sum(counts), 32, 32, 3), np.float32), np.empty(sum(counts), np.int64)
    begin = 0
    for path, count in zip(paths, counts):
        _read_cifar_into(path, images[begin:begin + count], labels[begin:begin + count])
        begin += count
    return images, labels


def _cifar10_dir(path):
    path = path or CIFAR10_DIR
    if not os.path.isdir(path):
        raise DatasetError(f"CIFAR-10 not found: no directory {path}. Unpack the binary version "
                           f"({CIFAR10_URL}: data_batch_1.bin .. data_batch_5.bin, "
                           f"{CIFAR_TEST_FILE}) there or pass --data_dir")
    missing = [f for f in CIFAR_TRAIN_FILES + (CIFAR_TEST_FILE,)
               if not os.path.isfile(os.path.join(path, f))]
    if missing:
        raise DatasetError(f"CIFAR-10 in {path} is incomplete: missing {', '.join(missing)}")
    return path


def load_cifar10(path=None):
    """(train_x, train_y, test_x, test_y) of the CIFAR-10 binary batches in `path`.

    Images are float32 NHWC [N, 32, 32, 3], normalised per channel with the
    training set's mean and standard deviation; labels are int64.
    """
    path = _cifar10_dir(path)
    train = _read_cifar_files([os.path.join(path, f) for f in CIFAR_TRAIN_FILES])
    test = _read_cifar_files([os.path.join(path, CIFAR_TEST_FILE)])
    return Dataset(*train, *test, num_classes=10, default_model="resnet20", augment="crop_flip")


def _check_cifar10(path):
    """Sizes and every label byte, without building the float arrays."""
    path = _cifar10_dir(path)
    for f in CIFAR_TRAIN_FILES + (CIFAR_TEST_FILE,):
        file = os.path.join(path, f)
        count = _cifar_records(file)
        records = np.fromfile(file, np.uint8)
        if records.size != count * CIFAR_RECORD:
            raise DatasetError(f"{file}: changed size while being read")
        _check_labels(records.reshape(count, CIFAR_RECORD)[:, 0], 10, file)


# ---------------------------------------------------------------- registry


@dataclass(frozen=True)
class DatasetInfo:
    loader: object        # path or None -> Dataset
    check: object         # path or None -> None, raises DatasetError
    default_model: str
    image_shape: tuple
    num_classes: int


DATASETS = {
    "fashion_mnist": DatasetInfo(load_fashion_mnist, _check_fashion_mnist, "small_cnn",
                                 (28, 28, 1), 10),
    "cifar10": DatasetInfo(load_cifar10, _check_cifar10, "resnet20", (32, 32, 3), 10),
}


def info(name):
    if name not in DATASETS:
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}")
    return DATASETS[name]


def load(name, path=None):
    """The Dataset `name` read from `path` (default: its usual place)."""
    return info(name).loader(path)


def check_available(name, path=None):
    """Fails early with the loader's message if the files are missing or malformed:
    reads every byte as load() does (gzip CRC, sizes, labels), in about a second."""
    info(name).check(path)


# ---------------------------------------------------------------- minibatches


def worker_seed(seed, worker_index):
    """Independent random streams for each (run seed, worker) pair."""
    return np.random.SeedSequence([int(seed), int(worker_index)])


class Batcher:
    """Endless shuffled minibatches (x, y) to feed; each worker seeds its own order.

    Every epoch is a fresh permutation; a batch never spans two epochs (the
    last len(x) % batch_size examples of an epoch's order are skipped, and
    land elsewhere in the next one). augment="crop_flip" applies the CIFAR
    augmentation of He et al. 2016: pad by 4 with zeros, random 32x32 crop,
    random horizontal flip.
    """

    def __init__(self, x, y, batch_size, seed=0, augment=None):
        if len(x) != len(y):
            raise ValueError(f"{len(x)} examples but {len(y)} labels")
        if not isinstance(batch_size, (int, np.integer)) or not 1 <= batch_size <= len(x):
            raise ValueError(f"batch_size must be an integer in [1, {len(x)}], got {batch_size!r}")
        if augment not in AUGMENTATIONS:
            raise ValueError(f"augment must be one of {AUGMENTATIONS}, got {augment!r}")
        if augment and np.ndim(x) != 4:
            raise ValueError(f"augment={augment!r} needs NHWC images, got shape {np.shape(x)}")
        self.x, self.y, self.batch_size, self.augment = x, y, int(batch_size), augment
        self.rng = np.random.default_rng(seed)
        self.epoch, self.position = 0, 0
        self.order = self.rng.permutation(len(x))

    def next(self):
        if self.position + self.batch_size > len(self.order):
            self.order, self.position = self.rng.permutation(len(self.x)), 0
            self.epoch += 1
        # Sorted indices gather faster; order within a batch does not matter.
        index = np.sort(self.order[self.position:self.position + self.batch_size])
        self.position += self.batch_size
        x, y = self.x[index], self.y[index]
        if self.augment == "crop_flip":
            x = crop_flip(x, self.rng)
        return x, y

    __next__ = next

    def __iter__(self):
        return self


def crop_flip(images, rng, pad=4):
    """Random crops of the zero-padded images, each flipped left-right with probability 1/2."""
    n, height, width, _ = images.shape
    padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    rows = rng.integers(0, 2 * pad + 1, n)
    cols = rng.integers(0, 2 * pad + 1, n)
    flips = rng.random(n) < 0.5
    out = np.empty_like(images)
    for i in range(n):
        crop = padded[i, rows[i]:rows[i] + height, cols[i]:cols[i] + width]
        out[i] = crop[:, ::-1] if flips[i] else crop
    return out


def in_order(x, y, batch_size, limit=None):
    """(x, y) slices covering the first `limit` examples (default all) once, in order."""
    count = len(x) if limit is None else min(int(limit), len(x))
    for begin in range(0, count, batch_size):
        end = min(begin + batch_size, count)
        yield x[begin:end], y[begin:end]


def evaluate(sess, correct, images, labels, x, y, batch_size=1000, limit=None):
    """Accuracy over (x, y): `correct` is a tensor counting right predictions of the
    batch fed to the `images` and `labels` placeholders (see models.correct_count)."""
    total = count = 0
    for bx, by in in_order(x, y, batch_size, limit):
        total += int(sess.run(correct, {images: bx, labels: by}))
        count += len(by)
    if count == 0:
        raise ValueError("nothing to evaluate: no examples")
    return total / count
