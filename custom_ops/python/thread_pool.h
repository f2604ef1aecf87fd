// A small persistent thread pool for the numpy module: starting threads on
// every call costs more than compressing a 1M-element tensor.
#ifndef TLC_PYTHON_THREAD_POOL_H_
#define TLC_PYTHON_THREAD_POOL_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tlc {

class ThreadPool {
 public:
  explicit ThreadPool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this, i] { Work(i); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }
  int size() const { return static_cast<int>(threads_.size()); }

  // Runs task(0..n-1) on the caller plus up to helpers pool threads.
  void Run(int64_t n, int helpers, const std::function<void(int64_t)>& task) {
    std::lock_guard<std::mutex> job_lock(job_mu_);  // one job at a time
    helpers = std::min<int>(helpers, size());
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = &task;
      count_ = n;
      next_.store(0);
      helpers_ = helpers;
      busy_ = helpers;
      ++generation_;
    }
    wake_.notify_all();
    Drain();
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return busy_ == 0; });
    task_ = nullptr;
  }

 private:
  void Drain() {
    for (int64_t i = next_.fetch_add(1); i < count_; i = next_.fetch_add(1)) (*task_)(i);
  }

  void Work(int id) {
    uint64_t seen = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (id >= helpers_) continue;
      }
      Drain();
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_ == 0) done_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex job_mu_, mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t)>* task_ = nullptr;
  int64_t count_ = 0;
  std::atomic<int64_t> next_{0};
  int helpers_ = 0, busy_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace tlc

#endif  // TLC_PYTHON_THREAD_POOL_H_
