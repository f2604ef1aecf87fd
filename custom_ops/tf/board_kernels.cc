// The round board (ops: board_ops.cc). One per parameter server, and for
// each push bucket:
//  - the round gate: the workers' pushes of the bucket's round arrived so
//    far. The chief's update takes a bucket's round through it once it is
//    complete, then the bucket's accumulators (each push arrives after its
//    accumulators got it). A take carries its update's generation: a chief's
//    new session fences the board, so an update of an earlier session still
//    waiting on the PS (a cut link leaves no reset) is refused at once and
//    takes nothing of the rounds to come;
//  - the latest round whose pull message the chief's update has logged. A
//    worker's reply for a bucket waits until the round its push went into is
//    there and then reads the log, so a bucket's pull leaves the PS while
//    later buckets' pushes still arrive. Unlike a token, a wait takes
//    nothing: a step that dies waiting leaves nothing behind for another.
//
// Waits and takes are AsyncOpKernels: they never hold an inter-op thread,
// and a cancelled step (a closed session) cancels them.
#include <algorithm>
#include <list>
#include <string>
#include <utility>
#include <vector>

#include "pending.h"
#include "scalar_input.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/mutex.h"

namespace tlc {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::CancellationManager;
using ::tensorflow::CancellationToken;
using ::tensorflow::DEVICE_CPU;
using ::tensorflow::mutex;
using ::tensorflow::mutex_lock;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::ResourceBase;
using ::tensorflow::ResourceHandle;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;
namespace core = ::tensorflow::core;

class RoundBoard : public ResourceBase {
 public:
  explicit RoundBoard(int64_t num_buckets)
      : rounds_(num_buckets, 0), gate_steps_(num_buckets, 0), arrivals_(num_buckets, 0) {}

  std::string DebugString() const override {
    return "TlcRoundBoard of " + std::to_string(rounds_.size()) + " buckets";
  }

  int64_t num_buckets() const { return static_cast<int64_t>(rounds_.size()); }

  ::absl::Status CheckBucket(int64_t bucket) const {
    if (bucket < 0 || bucket >= num_buckets()) {
      return errors::InvalidArgument("bucket ", bucket, " is not on a board of ", num_buckets(),
                                     " buckets");
    }
    return ::absl::OkStatus();
  }

  void Publish(int64_t bucket, int64_t round) {
    std::vector<Pending> finished;
    {
      mutex_lock lock(mu_);
      rounds_[bucket] = round;
      for (auto it = waits_.begin(); it != waits_.end();) {
        if (it->bucket == bucket && round >= it->at_least) {
          it->output = round;
          finished.push_back(std::move(*it));
          it = waits_.erase(it);
        } else {
          ++it;
        }
      }
    }
    Finish(&finished);
  }

  void Reset(int64_t round) {
    std::vector<Pending> finished;
    {
      mutex_lock lock(mu_);
      for (int64_t& r : rounds_) r = round;
      for (int64_t& s : gate_steps_) s = round;
      for (Pending& w : waits_) {
        w.output = round;
        finished.push_back(std::move(w));
      }
      waits_.clear();
      TakeReady(&finished);
    }
    Finish(&finished);
  }

  void Arrive(int64_t bucket, int64_t local_step) {
    std::vector<Pending> finished;
    {
      mutex_lock lock(mu_);
      if (local_step < gate_steps_[bucket]) return;  // stale: no accumulator counts it
      ++arrivals_[bucket];
      TakeReady(&finished);
    }
    Finish(&finished);
  }

  int64_t Fence() {
    std::vector<Pending> finished;
    int64_t generation;
    {
      mutex_lock lock(mu_);
      generation = ++generation_;
      for (Pending& t : takes_) {
        t.status = Refused(t.generation);
        finished.push_back(std::move(t));
      }
      takes_.clear();
    }
    Finish(&finished);
    return generation;
  }

  int64_t Generation() {
    mutex_lock lock(mu_);
    return generation_;
  }

  std::vector<int64_t> Read() {
    mutex_lock lock(mu_);
    return rounds_;
  }

  // Gate steps, then arrivals, then takes waiting, each num_buckets long.
  std::vector<int64_t> Gates() {
    mutex_lock lock(mu_);
    std::vector<int64_t> out = gate_steps_;
    out.insert(out.end(), arrivals_.begin(), arrivals_.end());
    std::vector<int64_t> waiting(rounds_.size(), 0);
    for (const Pending& t : takes_) ++waiting[t.bucket];
    out.insert(out.end(), waiting.begin(), waiting.end());
    return out;
  }

  // Completes at once if the bucket's round is at least at_least, else
  // when a publish or a reset comes; `done` runs once it has its output or
  // was cancelled.
  void Await(OpKernelContext* ctx, int64_t bucket, int64_t at_least,
             AsyncOpKernel::DoneCallback done) {
    Pending wait{ctx, bucket, at_least, 0, 0, std::move(done)};
    std::vector<Pending> finished;
    {
      mutex_lock lock(mu_);
      if (rounds_[bucket] >= at_least) {
        wait.output = rounds_[bucket];
        finished.push_back(std::move(wait));
      } else if (!Register(&wait, &waits_, "TlcRoundBoard wait was cancelled")) {
        finished.push_back(std::move(wait));
      }
    }
    Finish(&finished);
  }

  // Takes the bucket's round once num_required pushes arrived (in the order
  // the takes came), unless the generation is not the board's.
  void Take(OpKernelContext* ctx, int64_t bucket, int64_t num_required, int64_t generation,
            AsyncOpKernel::DoneCallback done) {
    Pending take{ctx, bucket, num_required, generation, 0, std::move(done)};
    std::vector<Pending> finished;
    {
      mutex_lock lock(mu_);
      if (generation != generation_) {
        take.status = Refused(generation);
        finished.push_back(std::move(take));
      } else if (Register(&take, &takes_, "TlcRoundBoard take was cancelled")) {
        TakeReady(&finished);
      } else {
        finished.push_back(std::move(take));
      }
    }
    Finish(&finished);
  }

 private:
  // A wait (at_least: the round it waits for) or a take (at_least: the
  // arrivals it needs).
  struct Pending {
    OpKernelContext* ctx;
    int64_t bucket;
    int64_t at_least;
    int64_t generation;
    int64_t output;
    AsyncOpKernel::DoneCallback done;
    CancellationManager* cm = nullptr;
    CancellationToken token = CancellationManager::kInvalidToken;
    ::absl::Status status;
  };

  ::absl::Status Refused(int64_t generation) const TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return errors::Aborted("TlcRoundBoard: a take of update generation ", generation,
                           " refused: the chief began generation ", generation_,
                           " (an update of an earlier session)");
  }

  // Queues `p` with its step's cancellation; false (its status set) if the
  // step is cancelled already.
  bool Register(Pending* p, std::list<Pending>* queue, const char* what)
      TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    CancellationManager* cm = p->ctx->cancellation_manager();
    if (cm != nullptr) {
      const CancellationToken token = cm->get_cancellation_token();
      if (!cm->RegisterCallback(token, [this, cm, token, queue, what] {
            CancelPending(&mu_, queue, cm, token, what);
          })) {
        p->status = errors::Cancelled(what);
        return false;
      }
      p->cm = cm;
      p->token = token;
    }
    queue->push_back(std::move(*p));
    return true;
  }

  // The first take of each bucket whose round is complete, if any.
  void TakeReady(std::vector<Pending>* finished) TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto it = takes_.begin(); it != takes_.end();) {
      const int64_t b = it->bucket;
      bool first = true;
      for (auto before = takes_.begin(); before != it; ++before) first &= before->bucket != b;
      if (first && arrivals_[b] >= it->at_least) {
        arrivals_[b] = 0;
        it->output = gate_steps_[b]++;
        finished->push_back(std::move(*it));
        it = takes_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // Outside the lock: outputs (or the status), then the callbacks.
  static void Finish(std::vector<Pending>* finished) {
    for (Pending& p : *finished) {
      if (p.cm != nullptr) p.cm->DeregisterCallback(p.token);
      if (p.status.ok()) {
        Tensor* out = nullptr;
        p.status = p.ctx->allocate_output(0, TensorShape({}), &out);
        if (p.status.ok()) out->scalar<int64_t>()() = p.output;
      }
      if (!p.status.ok()) p.ctx->SetStatus(p.status);
      p.done();
    }
  }

  mutex mu_;
  std::vector<int64_t> rounds_ TF_GUARDED_BY(mu_);
  std::vector<int64_t> gate_steps_ TF_GUARDED_BY(mu_);
  std::vector<int64_t> arrivals_ TF_GUARDED_BY(mu_);
  int64_t generation_ TF_GUARDED_BY(mu_) = 0;
  std::list<Pending> waits_ TF_GUARDED_BY(mu_);
  std::list<Pending> takes_ TF_GUARDED_BY(mu_);
};

class RoundBoardOp : public OpKernel {
 public:
  explicit RoundBoardOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_buckets", &num_buckets_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("container", &container_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shared_name", &shared_name_));
    if (shared_name_.empty()) shared_name_ = name();
  }

  void Compute(OpKernelContext* ctx) override {
    const ResourceHandle handle =
        ::tensorflow::MakeResourceHandle<RoundBoard>(ctx, container_, shared_name_);
    core::RefCountPtr<RoundBoard> board;
    OP_REQUIRES_OK(ctx, ::tensorflow::LookupOrCreateResource<RoundBoard>(
                            ctx, handle, &board, [this](RoundBoard** made) {
                              *made = new RoundBoard(num_buckets_);
                              return ::absl::OkStatus();
                            }));
    OP_REQUIRES(ctx, board->num_buckets() == num_buckets_,
                errors::InvalidArgument("a round board of that name has ", board->num_buckets(),
                                        " buckets (asked: ", num_buckets_, ")"));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<ResourceHandle>()() = handle;
  }

 private:
  int64_t num_buckets_;
  std::string container_, shared_name_;
};

bool Lookup(OpKernelContext* ctx, core::RefCountPtr<RoundBoard>* board) {
  return ResourceInput(ctx, board);
}

// The board and a checked bucket from inputs 0 and 1.
bool BoardAndBucket(OpKernelContext* ctx, core::RefCountPtr<RoundBoard>* board,
                    int32_t* bucket) {
  if (!Lookup(ctx, board) || !ScalarInput<int32_t>(ctx, 1, "bucket", bucket)) return false;
  const ::absl::Status s = (*board)->CheckBucket(*bucket);
  if (!s.ok()) ctx->CtxFailure(__FILE__, __LINE__, s);
  return s.ok();
}

class PublishOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    core::RefCountPtr<RoundBoard> board;
    int32_t bucket;
    int64_t round;
    if (!BoardAndBucket(ctx, &board, &bucket) ||
        !ScalarInput<int64_t>(ctx, 2, "round", &round)) {
      return;
    }
    board->Publish(bucket, round);
  }
};

class ResetOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    core::RefCountPtr<RoundBoard> board;
    int64_t round;
    if (!Lookup(ctx, &board) || !ScalarInput<int64_t>(ctx, 1, "round", &round)) return;
    board->Reset(round);
  }
};

class WaitOp : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    core::RefCountPtr<RoundBoard> board;
    int32_t bucket;
    int64_t at_least;
    if (!BoardAndBucket(ctx, &board, &bucket) ||
        !ScalarInput<int64_t>(ctx, 2, "at_least", &at_least)) {
      done();
      return;
    }
    // The wait keeps the board alive until it is done.
    RoundBoard* raw = board.release();
    raw->Await(ctx, bucket, at_least, [raw, done = std::move(done)] {
      done();
      raw->Unref();
    });
  }
};

// Read (each bucket's logged round) or Gates (3 rows: gate steps, arrivals,
// takes waiting).
template <bool kGates>
class ReadOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    core::RefCountPtr<RoundBoard> board;
    if (!Lookup(ctx, &board)) return;
    const std::vector<int64_t> values = kGates ? board->Gates() : board->Read();
    const TensorShape shape = kGates ? TensorShape({3, board->num_buckets()})
                                     : TensorShape({board->num_buckets()});
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    std::copy(values.begin(), values.end(), out->flat<int64_t>().data());
  }
};

class ArriveOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    core::RefCountPtr<RoundBoard> board;
    int32_t bucket;
    int64_t local_step;
    if (!BoardAndBucket(ctx, &board, &bucket) ||
        !ScalarInput<int64_t>(ctx, 2, "local_step", &local_step)) {
      return;
    }
    board->Arrive(bucket, local_step);
  }
};

class TakeOp : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    core::RefCountPtr<RoundBoard> board;
    int32_t bucket, num_required;
    int64_t generation;
    if (!BoardAndBucket(ctx, &board, &bucket) ||
        !ScalarInput<int32_t>(ctx, 2, "num_required", &num_required) ||
        !ScalarInput<int64_t>(ctx, 3, "generation", &generation)) {
      done();
      return;
    }
    if (num_required < 1) {
      ctx->SetStatus(errors::InvalidArgument("num_required must be >= 1, got ", num_required));
      done();
      return;
    }
    RoundBoard* raw = board.release();  // alive until the take is done
    raw->Take(ctx, bucket, num_required, generation, [raw, done = std::move(done)] {
      done();
      raw->Unref();
    });
  }
};

// Fence (a new generation) or Generation (the current one).
template <bool kFence>
class GenerationOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    core::RefCountPtr<RoundBoard> board;
    if (!Lookup(ctx, &board)) return;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int64_t>()() = kFence ? board->Fence() : board->Generation();
  }
};

REGISTER_KERNEL_BUILDER(Name("TlcRoundBoard").Device(DEVICE_CPU), RoundBoardOp);
REGISTER_KERNEL_BUILDER(Name("TlcRoundBoardPublish").Device(DEVICE_CPU), PublishOp);
REGISTER_KERNEL_BUILDER(Name("TlcRoundBoardReset").Device(DEVICE_CPU), ResetOp);
REGISTER_KERNEL_BUILDER(Name("TlcRoundBoardWait").Device(DEVICE_CPU), WaitOp);
REGISTER_KERNEL_BUILDER(Name("TlcRoundBoardRead").Device(DEVICE_CPU), ReadOp<false>);
REGISTER_KERNEL_BUILDER(Name("TlcRoundBoardGates").Device(DEVICE_CPU), ReadOp<true>);
REGISTER_KERNEL_BUILDER(Name("TlcRoundBoardArrive").Device(DEVICE_CPU), ArriveOp);
REGISTER_KERNEL_BUILDER(Name("TlcRoundBoardTake").Device(DEVICE_CPU), TakeOp);
REGISTER_KERNEL_BUILDER(Name("TlcRoundBoardFence").Device(DEVICE_CPU), GenerationOp<true>);
REGISTER_KERNEL_BUILDER(Name("TlcRoundBoardGeneration").Device(DEVICE_CPU), GenerationOp<false>);

}  // namespace
}  // namespace tlc
