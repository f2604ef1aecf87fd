// The codec core's Executor (custom_ops/core/executor.h) over TensorFlow's
// CPU worker pool, for every kernel of the op library.
#ifndef TLC_CUSTOM_OPS_TF_TF_EXECUTOR_H_
#define TLC_CUSTOM_OPS_TF_TF_EXECUTOR_H_

#include <cstdint>
#include <functional>

#include "../core/executor.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/util/work_sharder.h"

namespace tlc {

inline Executor TfExecutor(::tensorflow::OpKernelContext* ctx) {
  const auto* workers = ctx->device()->tensorflow_cpu_worker_threads();
  Executor exec;
  exec.num_threads = workers->num_threads;
  exec.run = [workers](int64_t n, const std::function<void(int64_t)>& task) {
    // A huge cost per unit makes Shard run one task per shard.
    ::tensorflow::Shard(workers->num_threads, workers->workers, n, int64_t{1} << 40,
                        [&task](int64_t begin, int64_t end) {
                          for (int64_t i = begin; i < end; ++i) task(i);
                        });
  };
  return exec;
}

}  // namespace tlc

#endif  // TLC_CUSTOM_OPS_TF_TF_EXECUTOR_H_
