// How the core runs work in parallel without depending on any thread pool.
// The TF kernels hand in TensorFlow's CPU worker pool, the numpy module a
// small std::thread runner. All kernels split work so that the output bytes
// do not depend on the number of threads.
#ifndef TLC_CORE_EXECUTOR_H_
#define TLC_CORE_EXECUTOR_H_

#include <algorithm>
#include <cstdint>
#include <functional>

namespace tlc {

struct Executor {
  // Number of threads the runner may use at once (>= 1).
  int num_threads = 1;
  // Calls task(i) for every i in [0, num_tasks), possibly concurrently, and
  // returns when all calls have returned. Empty means run inline.
  std::function<void(int64_t num_tasks, const std::function<void(int64_t)>& task)> run;

  void ParallelFor(int64_t num_tasks, const std::function<void(int64_t)>& task) const {
    if (num_tasks <= 0) return;
    if (num_tasks == 1 || !run || num_threads <= 1) {
      for (int64_t i = 0; i < num_tasks; ++i) task(i);
      return;
    }
    run(num_tasks, task);
  }

  // Splits `units` items into at most num_threads tasks of at least
  // `min_units_per_task` items each.
  int64_t NumTasks(int64_t units, int64_t min_units_per_task) const {
    if (units <= 0) return 0;
    int64_t by_size = std::max<int64_t>(1, units / std::max<int64_t>(1, min_units_per_task));
    return std::min<int64_t>(std::max(1, num_threads), by_size);
  }
};

// [begin, end) of task `i` when `units` items are split into `tasks` parts.
inline void TaskRange(int64_t units, int64_t tasks, int64_t i, int64_t* begin, int64_t* end) {
  *begin = units * i / tasks;
  *end = units * (i + 1) / tasks;
}

// Executor that runs serially; used by tests and small inputs.
inline const Executor& SerialExecutor() {
  static const Executor* serial = new Executor();
  return *serial;
}

}  // namespace tlc

#endif  // TLC_CORE_EXECUTOR_H_

namespace tlc {
// Front ends allocate variable-length outputs once the size is known: TF via
// allocate_output, numpy via a new array. Returns nullptr if it cannot
// (a zero-size request may also return nullptr).
using ByteAllocator = std::function<uint8_t*(int64_t size)>;
}  // namespace tlc
