"""Datasets: Fashion-MNIST (IDX files from Debian's dataset-fashion-mnist) and
CIFAR-10 (the standard binary batches), plus per-worker minibatches."""
import gzip
import os
import struct
from dataclasses import dataclass

import numpy as np

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
CIFAR10_DIR = "data/cifar-10-batches-bin"


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


def _open(path):
    for candidate in (path, path + ".gz"):
        if os.path.exists(candidate):
            with open(candidate, "rb") as f:
                raw = f.read()
            return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    raise DatasetError(f"missing file {path}(.gz)")


def read_idx(path, expected_dims):
    """Reads an IDX file (unsigned bytes) and checks its header and length."""
    raw = _open(path)
    if len(raw) < 4:
        raise DatasetError(f"{path}: file too short for an IDX header")
    zero, dtype, dims = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08 or dims != expected_dims:
        raise DatasetError(f"{path}: not an unsigned-byte IDX file with {expected_dims} dimensions")
    header = 4 + 4 * dims
    if len(raw) < header:
        raise DatasetError(f"{path}: truncated IDX header")
    shape = struct.unpack(">" + "I" * dims, raw[4:header])
    size = int(np.prod(shape))
    if len(raw) - header != size:
        raise DatasetError(f"{path}: header says {size} bytes of data, file has {len(raw) - header}")
    return np.frombuffer(raw, np.uint8, offset=header).reshape(shape)


def load_fashion_mnist(path=None):
    path = path or FASHION_MNIST_DIR
    if not os.path.isdir(path):
        raise DatasetError(f"Fashion-MNIST not found in {path}: install the Debian package "
                           "dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or "
                           "pass --data_dir")
    parts = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx(os.path.join(path, f"{prefix}-images-idx3-ubyte"), 3)
        labels = read_idx(os.path.join(path, f"{prefix}-labels-idx1-ubyte"), 1)
        if len(images) != len(labels):
            raise DatasetError(f"{path}: {len(images)} {split} images but {len(labels)} labels")
        if labels.size and labels.max() > 9:
            raise DatasetError(f"{path}: {split} label {labels.max()} outside 0..9")
        parts[split] = ((images.astype(np.float32) / 255.0)[..., None], labels.astype(np.int64))
    return Dataset(*parts["train"], *parts["test"], num_classes=10, default_model="small_cnn")


CIFAR_RECORD = 1 + 3 * 32 * 32
CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32)
CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], np.float32)


def read_cifar_batch(path):
    """Records of one label byte and 3072 bytes of CHW pixels."""
    if not os.path.exists(path):
        raise DatasetError(f"missing CIFAR-10 batch {path}")
    raw = np.fromfile(path, np.uint8)
    if raw.size == 0 or raw.size % CIFAR_RECORD:
        raise DatasetError(f"{path}: {raw.size} bytes is not a whole number of "
                           f"{CIFAR_RECORD}-byte records")
    records = raw.reshape(-1, CIFAR_RECORD)
    labels = records[:, 0].astype(np.int64)
    if labels.max() > 9:
        raise DatasetError(f"{path}: label {labels.max()} outside 0..9")
    images = records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).astype(np.float32) / 255.0
    return (images - CIFAR_MEAN) / CIFAR_STD, labels


def load_cifar10(path=None):
    path = path or CIFAR10_DIR
    if not os.path.isdir(path):
        raise DatasetError(f"CIFAR-10 not found in {path}: put the binary batches "
                           "(data_batch_1.bin .. data_batch_5.bin, test_batch.bin) there")
    train = [read_cifar_batch(os.path.join(path, f"data_batch_{i}.bin")) for i in range(1, 6)]
    test_x, test_y = read_cifar_batch(os.path.join(path, "test_batch.bin"))
    return Dataset(np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train]),
                   test_x, test_y, num_classes=10, default_model="resnet20")


LOADERS = {"fashion_mnist": load_fashion_mnist, "cifar10": load_cifar10}


def load(name, path=None):
    if name not in LOADERS:
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(sorted(LOADERS))}")
    return LOADERS[name](path)


def check_available(name, path=None):
    """Fails early, with the loader's message, if the dataset cannot be read."""
    load(name, path)


class Batcher:
    """Endless shuffled minibatches; each worker seeds its own order."""

    def __init__(self, x, y, batch_size, seed=0):
        if batch_size < 1 or batch_size > len(x):
            raise ValueError(f"batch_size must be in [1, {len(x)}], got {batch_size}")
        self.x, self.y, self.batch_size = x, y, batch_size
        self.rng = np.random.default_rng(seed)
        self.order, self.position = self.rng.permutation(len(x)), 0

    def next(self):
        if self.position + self.batch_size > len(self.order):
            self.order, self.position = self.rng.permutation(len(self.x)), 0
        index = self.order[self.position:self.position + self.batch_size]
        self.position += self.batch_size
        return self.x[index], self.y[index]
