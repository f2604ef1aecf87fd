// A small persistent thread pool for the numpy module: starting threads on
// every call costs more than compressing a 1M-element tensor.
//
// Waking a sleeping thread takes tens of microseconds (more on a virtual
// machine), as long as a whole pass over a 1M-element tensor. So the caller
// works on the tasks itself and waits only for tasks that a helper has taken,
// never for a helper that has not woken up yet; and a helper that just worked
// spins for a moment before it sleeps, because a compress call makes two
// passes in a row.
#ifndef TLC_PYTHON_THREAD_POOL_H_
#define TLC_PYTHON_THREAD_POOL_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
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

  // Runs task(0..n-1) on the caller plus up to `helpers` pool threads.
  void Run(int64_t n, int helpers, const std::function<void(int64_t)>& task) {
    std::lock_guard<std::mutex> job_lock(job_mu_);  // one job at a time
    auto job = std::make_shared<Job>(n, &task, std::min<int>(helpers, size()));
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = job;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    job->Drain();
    // Tasks still running are on helpers that are about to finish.
    const auto until = std::chrono::steady_clock::now() + kSpinTime;
    while (job->left.load(std::memory_order_acquire) != 0 &&
           std::chrono::steady_clock::now() < until) {
      Pause();
    }
    std::unique_lock<std::mutex> lock(job->mu);
    job->done.wait(lock, [&] { return job->left.load(std::memory_order_acquire) == 0; });
  }

 private:
  // One Run call. Helpers that wake after it ended find no task left; the
  // shared_ptr keeps the counters alive for them, and they never call `task`.
  struct Job {
    Job(int64_t n, const std::function<void(int64_t)>* task, int helpers)
        : count(n), task(task), helpers(helpers), left(n) {}
    void Drain() {
      for (int64_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
        (*task)(i);
        if (left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
          std::lock_guard<std::mutex> lock(mu);
          done.notify_all();
        }
      }
    }
    const int64_t count;
    const std::function<void(int64_t)>* task;
    const int helpers;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> left;
    std::mutex mu;
    std::condition_variable done;
  };

  void Work(int id) {
    uint64_t seen = 0;
    bool worked = false;
    while (true) {
      if (worked) {  // only threads that just helped: the rest would steal cores
        const auto until = std::chrono::steady_clock::now() + kSpinTime;
        while (!stop_.load(std::memory_order_relaxed) &&
               generation_.load(std::memory_order_acquire) == seen &&
               std::chrono::steady_clock::now() < until) {
          Pause();
        }
      }
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
        if (stop_.load()) return;
        seen = generation_.load();
        job = job_;
      }
      worked = id < job->helpers;
      if (worked) job->Drain();
    }
  }

  static constexpr std::chrono::microseconds kSpinTime{200};
  static void Pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }

  std::vector<std::thread> threads_;
  std::mutex job_mu_, mu_;
  std::condition_variable wake_;
  std::shared_ptr<Job> job_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace tlc

#endif  // TLC_PYTHON_THREAD_POOL_H_
