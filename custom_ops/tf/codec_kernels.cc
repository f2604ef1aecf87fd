// CPU kernels of the codec ops (codec_ops.cc): thin adapters from TF tensors
// to the codec core.
#include <cstring>
#include <vector>

#include "../core/base3.h"
#include "../core/golomb.h"
#include "../core/threelc.h"
#include "../core/zero_run.h"
#include "scalar_input.h"
#include "tf_executor.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/util/work_sharder.h"

namespace tlc {
namespace {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;

// Largest tensor a decoder will allocate (2^40 elements), so a hostile size
// fails cleanly instead of exhausting memory first.
constexpr int64_t kMaxElements = int64_t{1} << 40;

bool Ok(OpKernelContext* ctx, const Status& s) {
  if (!s.ok()) ctx->CtxFailure(__FILE__, __LINE__, errors::InvalidArgument(s.message()));
  return s.ok();
}

bool Size(OpKernelContext* ctx, int index, const char* name, int64_t* value) {
  if (!ScalarInput<int64_t>(ctx, index, name, value)) return false;
  if (*value < 0 || *value > kMaxElements) {
    ctx->CtxFailure(__FILE__, __LINE__,
                    errors::InvalidArgument(name, " must be in [0, 2^40], got ", *value));
    return false;
  }
  return true;
}

// Allocates output `index` as a byte vector once the core knows its size.
ByteAllocator OutputBytes(OpKernelContext* ctx, int index) {
  return [ctx, index](int64_t size) -> uint8_t* {
    Tensor* out = nullptr;
    if (!ctx->allocate_output(index, TensorShape({size}), &out).ok()) return nullptr;
    return out->flat<uint8_t>().data();
  };
}

void CopyToOutput(OpKernelContext* ctx, int index, const void* data, int64_t count,
                  size_t elem_size, Tensor** out) {
  OP_REQUIRES_OK(ctx, ctx->allocate_output(index, TensorShape({count}), out));
  if (count > 0) std::memcpy((*out)->data(), data, count * elem_size);
}

// Reads the attrs shared by the 3LC ops: adaptive and block_size.
void Get3LCAttrs(OpKernelConstruction* ctx, bool* adaptive, int64_t* block_size) {
  OP_REQUIRES_OK(ctx, ctx->GetAttr("adaptive", adaptive));
  OP_REQUIRES_OK(ctx, ctx->GetAttr("block_size", block_size));
  const Status s = CheckBlockSize(*block_size);
  OP_REQUIRES(ctx, s.ok(), errors::InvalidArgument(s.message()));
}

// Output `index` holds the scales: a scalar per tensor, a vector per block.
bool AllocateScales(OpKernelContext* ctx, int index, int64_t n, int64_t block_size,
                    Tensor** out) {
  const TensorShape shape =
      block_size == 0 ? TensorShape({}) : TensorShape({NumScales(n, block_size)});
  ::tensorflow::Status s = ctx->allocate_output(index, shape, out);
  if (!s.ok()) ctx->CtxFailureWithWarning(__FILE__, __LINE__, s);
  return s.ok();
}

// Checks input `index` is a scalar (per tensor) or a vector (per block) of scales.
bool ScalesInput(OpKernelContext* ctx, int index, int64_t block_size, const Tensor** scales) {
  *scales = &ctx->input(index);
  const TensorShape& shape = (*scales)->shape();
  const bool ok = block_size == 0 ? ::tensorflow::TensorShapeUtils::IsScalar(shape)
                                  : ::tensorflow::TensorShapeUtils::IsVector(shape);
  if (!ok) {
    ctx->CtxFailure(__FILE__, __LINE__,
                    errors::InvalidArgument("m must be a ",
                                            block_size == 0 ? "scalar" : "vector of block scales",
                                            ", got shape ", shape.DebugString()));
  }
  return ok;
}

class Compress3LCOp : public OpKernel {
 public:
  explicit Compress3LCOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    Get3LCAttrs(ctx, &adaptive_, &block_size_);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& error = ctx->input(1);
    float s;
    if (!ScalarInput<float>(ctx, 2, "sparsity_multiplier", &s)) return;
    OP_REQUIRES(ctx, x.NumElements() == error.NumElements(),
                errors::InvalidArgument("error has ", error.NumElements(), " elements, x has ",
                                        x.NumElements()));
    Tensor* new_error = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({1}, 2, error.shape(), &new_error));
    Tensor* m = nullptr;
    if (!AllocateScales(ctx, 1, x.NumElements(), block_size_, &m)) return;
    Compress3LCResult result;
    Ok(ctx, tlc::Compress3LC(x.flat<float>().data(), error.flat<float>().data(),
                             new_error->flat<float>().data(), x.NumElements(), s, block_size_,
                             adaptive_, TfExecutor(ctx), OutputBytes(ctx, 0),
                             m->flat<float>().data(), &result));
  }

 private:
  bool adaptive_;
  int64_t block_size_;
};

// Same as Compress3LCOp, but the error buffer is a resource variable updated
// in place: no new n-element tensor per step.
class Compress3LCUpdateErrorOp : public OpKernel {
 public:
  explicit Compress3LCUpdateErrorOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    Get3LCAttrs(ctx, &adaptive_, &block_size_);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    float s;
    if (!ScalarInput<float>(ctx, 2, "sparsity_multiplier", &s)) return;
    ::tensorflow::core::RefCountPtr<::tensorflow::Var> var;
    OP_REQUIRES_OK(ctx, ::tensorflow::LookupResource(
                            ctx, ::tensorflow::HandleFromInput(ctx, 1), &var));
    ::tensorflow::mutex_lock lock(*var->mu());
    Tensor* error = var->tensor();
    OP_REQUIRES(ctx, var->is_initialized && error->dtype() == ::tensorflow::DT_FLOAT,
                errors::InvalidArgument("error buffer must be an initialised float32 variable"));
    OP_REQUIRES(ctx, x.NumElements() == error->NumElements(),
                errors::InvalidArgument("error has ", error->NumElements(), " elements, x has ",
                                        x.NumElements()));
    if (var->copy_on_read_mode.load() || !error->RefCountIsOne()) {
      // A reader still holds the buffer: update a private copy instead.
      Tensor copy;
      OP_REQUIRES_OK(ctx, ctx->allocate_temp(::tensorflow::DT_FLOAT, error->shape(), &copy));
      if (error->NumElements() > 0) std::memcpy(copy.data(), error->data(), error->TotalBytes());
      *error = copy;
    }
    float* e = error->flat<float>().data();
    Tensor* m = nullptr;
    if (!AllocateScales(ctx, 1, x.NumElements(), block_size_, &m)) return;
    Compress3LCResult result;
    Ok(ctx, tlc::Compress3LC(x.flat<float>().data(), e, e, x.NumElements(), s, block_size_,
                             adaptive_, TfExecutor(ctx), OutputBytes(ctx, 0),
                             m->flat<float>().data(), &result));
  }

 private:
  bool adaptive_;
  int64_t block_size_;
};

class Decompress3LCOp : public OpKernel {
 public:
  explicit Decompress3LCOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    Get3LCAttrs(ctx, &adaptive_, &block_size_);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& code = ctx->input(0);
    const Tensor* m;
    int64_t n;
    if (!ScalesInput(ctx, 1, block_size_, &m) || !Size(ctx, 2, "num_elements", &n)) return;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &out));
    Ok(ctx, tlc::Decompress3LC(code.flat<uint8_t>().data(), code.NumElements(),
                               m->flat<float>().data(), m->NumElements(), n, block_size_,
                               adaptive_, false, TfExecutor(ctx), out->flat<float>().data()));
  }

 private:
  bool adaptive_;
  int64_t block_size_;
};

class Decompress3LCAccumulateOp : public OpKernel {
 public:
  explicit Decompress3LCAccumulateOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    Get3LCAttrs(ctx, &adaptive_, &block_size_);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& base = ctx->input(0);
    const Tensor& code = ctx->input(1);
    const Tensor* m;
    if (!ScalesInput(ctx, 2, block_size_, &m)) return;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, base.shape(), &out));
    if (out->data() != base.data() && base.NumElements() > 0) {
      std::memcpy(out->data(), base.data(), base.TotalBytes());
    }
    Ok(ctx, tlc::Decompress3LC(code.flat<uint8_t>().data(), code.NumElements(),
                               m->flat<float>().data(), m->NumElements(), base.NumElements(),
                               block_size_, adaptive_, true, TfExecutor(ctx),
                               out->flat<float>().data()));
  }

 private:
  bool adaptive_;
  int64_t block_size_;
};

class PackBase3Op : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& q = ctx->input(0);
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({PackedSize(q.NumElements())}), &out));
    Ok(ctx, PackBase3(q.flat<int8_t>().data(), q.NumElements(), out->flat<uint8_t>().data()));
  }
};

class UnpackBase3Op : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& packed = ctx->input(0);
    int64_t n;
    if (!Size(ctx, 1, "n", &n)) return;
    OP_REQUIRES(ctx, packed.NumElements() == PackedSize(n),
                errors::InvalidArgument("unpack_base3: expected ", PackedSize(n), " bytes for ", n,
                                        " values, got ", packed.NumElements()));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &out));
    Ok(ctx, UnpackBase3(packed.flat<uint8_t>().data(), packed.NumElements(), n,
                        out->flat<int8_t>().data()));
  }
};

class ZreEncodeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& packed = ctx->input(0);
    Ok(ctx, ZreEncode(packed.flat<uint8_t>().data(), packed.NumElements(), TfExecutor(ctx),
                      OutputBytes(ctx, 0)));
  }
};

class ZreDecodeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& code = ctx->input(0);
    int64_t n;
    if (!Size(ctx, 1, "n_bytes", &n)) return;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n}), &out));
    Ok(ctx, ZreDecode(code.flat<uint8_t>().data(), code.NumElements(), n, TfExecutor(ctx),
                      out->flat<uint8_t>().data()));
  }
};

class GolombEncodeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& positions = ctx->input(0);
    int32_t b;
    if (!ScalarInput<int32_t>(ctx, 1, "b", &b)) return;
    std::vector<uint8_t> code;
    if (!Ok(ctx, GolombEncode(positions.flat<int64_t>().data(), positions.NumElements(), b,
                              &code))) {
      return;
    }
    Tensor* out = nullptr;
    CopyToOutput(ctx, 0, code.data(), code.size(), 1, &out);
  }
};

class GolombDecodeOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& code = ctx->input(0);
    int32_t b;
    int64_t n;
    if (!ScalarInput<int32_t>(ctx, 1, "b", &b) || !Size(ctx, 2, "n", &n)) return;
    std::vector<int64_t> positions;
    if (!Ok(ctx, GolombDecode(code.flat<uint8_t>().data(), code.NumElements(), b, n,
                              &positions))) {
      return;
    }
    Tensor* out = nullptr;
    CopyToOutput(ctx, 0, positions.data(), positions.size(), sizeof(int64_t), &out);
  }
};

class GolombBstarOp : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    double p;
    if (!ScalarInput<double>(ctx, 0, "p", &p)) return;
    int b;
    if (!Ok(ctx, GolombBstar(p, &b))) return;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int32_t>()() = b;
  }
};

#define TLC_KERNEL(name, cls) \
  REGISTER_KERNEL_BUILDER(Name(name).Device(DEVICE_CPU), cls)
TLC_KERNEL("TlcCompress3LC", Compress3LCOp);
TLC_KERNEL("TlcCompress3LCUpdateError", Compress3LCUpdateErrorOp);
TLC_KERNEL("TlcDecompress3LC", Decompress3LCOp);
TLC_KERNEL("TlcDecompress3LCAccumulate", Decompress3LCAccumulateOp);
TLC_KERNEL("TlcPackBase3", PackBase3Op);
TLC_KERNEL("TlcUnpackBase3", UnpackBase3Op);
TLC_KERNEL("TlcZreEncode", ZreEncodeOp);
TLC_KERNEL("TlcZreDecode", ZreDecodeOp);
TLC_KERNEL("TlcGolombEncode", GolombEncodeOp);
TLC_KERNEL("TlcGolombDecode", GolombDecodeOp);
TLC_KERNEL("TlcGolombBstar", GolombBstarOp);
#undef TLC_KERNEL

}  // namespace
}  // namespace tlc
