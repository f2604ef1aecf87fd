"""tlc: 3LC gradient compression for TensorFlow parameter-server training."""
