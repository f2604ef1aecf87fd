// CPU kernels of the step message ops (message_ops.cc; format:
// custom_ops/core/message.h, docs/FORMAT.md).
#include <cstring>
#include <string>
#include <vector>

#include "../core/message.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/partial_tensor_shape.h"
#include "tensorflow/core/framework/types.h"

namespace tlc {
namespace {

using ::tensorflow::DataType;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::OpInputList;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

// A part's dtype must be one whose values travel as their bytes in memory (a
// bool: one byte, 0 or 1); `where` names the part in the error.
::tensorflow::Status CheckTravels(DataType type, const std::string& where) {
  if (type == ::tensorflow::DT_BOOL || ::tensorflow::DataTypeCanUseMemcpy(type)) {
    return ::tensorflow::Status();
  }
  return ::tensorflow::errors::InvalidArgument(where, ": dtype ",
                                               ::tensorflow::DataTypeString(type),
                                               " cannot travel in a step message");
}

class PackMessageOp : public OpKernel {
 public:
  explicit PackMessageOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::vector<DataType> types;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("T", &types));
    for (size_t i = 0; i < types.size(); ++i) {
      OP_REQUIRES_OK(ctx, CheckTravels(types[i], "tlc: step message part " + std::to_string(i)));
    }
  }

  void Compute(OpKernelContext* ctx) override {
    OpInputList parts;
    OP_REQUIRES_OK(ctx, ctx->input_list("parts", &parts));
    const Status count = message::CheckPartCount(parts.size());
    OP_REQUIRES(ctx, count.ok(), ::tensorflow::errors::InvalidArgument("tlc: ", count.message()));
    std::vector<const uint8_t*> data(parts.size());
    std::vector<size_t> lengths(parts.size());
    for (int i = 0; i < parts.size(); ++i) {
      const auto bytes = parts[i].tensor_data();
      data[i] = reinterpret_cast<const uint8_t*>(bytes.data());
      lengths[i] = bytes.size();
    }
    Tensor* out = nullptr;
    const int64_t size = static_cast<int64_t>(message::PackedSize(lengths));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({size}), &out));
    message::Pack(data, lengths, out->flat<uint8_t>().data());
  }
};

class UnpackMessageOp : public OpKernel {
 public:
  explicit UnpackMessageOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("out_types", &types_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shapes", &shapes_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("what", &what_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("part_bytes", &part_bytes_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("item_bytes", &item_bytes_));
    num_parts_ = static_cast<int>(types_.size());
    OP_REQUIRES(ctx, shapes_.empty() || shapes_.size() == types_.size(),
                ::tensorflow::errors::InvalidArgument(
                    "tlc: ", what_, ": shapes needs ", num_parts_,
                    " entries (one per part) or none, got ", shapes_.size()));
    for (const auto* list : {&part_bytes_, &item_bytes_}) {
      OP_REQUIRES(ctx, list->empty() || list->size() == static_cast<size_t>(num_parts_),
                  ::tensorflow::errors::InvalidArgument(
                      "tlc: ", what_, ": part_bytes and item_bytes need ", num_parts_,
                      " entries (one per part) or none, got ", list->size()));
    }
    for (int64_t item : item_bytes_) {
      OP_REQUIRES(ctx, item >= 1,
                  ::tensorflow::errors::InvalidArgument("tlc: ", what_,
                                                        ": item_bytes must be >= 1, got ", item));
    }
    sizes_.resize(num_parts_);
    for (int i = 0; i < num_parts_; ++i) {
      const DataType type = types_[i];
      OP_REQUIRES_OK(ctx, CheckTravels(type, "tlc: " + what_ + ": part " + std::to_string(i)));
      sizes_[i] = static_cast<int64_t>(::tensorflow::DataTypeSize(type));
      // Each part's values are whole: its byte count a multiple of the dtype's size.
      OP_REQUIRES(ctx, sizes_[i] >= 1 && (item_bytes_.empty() || item_bytes_[i] % sizes_[i] == 0),
                  ::tensorflow::errors::InvalidArgument(
                      "tlc: ", what_, ": part ", i, ": item_bytes ",
                      item_bytes_.empty() ? 0 : item_bytes_[i], " is not a whole number of ",
                      ::tensorflow::DataTypeString(type), " values"));
    }
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& input = ctx->input(0);
    OP_REQUIRES(ctx, input.dims() == 1,
                ::tensorflow::errors::InvalidArgument("tlc: ", what_, ": a step message is a "
                                                      "vector of bytes, got shape ",
                                                      input.shape().DebugString()));
    const uint8_t* data = input.flat<uint8_t>().data();
    std::vector<message::Span> spans;
    const Status parsed = message::Parse(data, input.NumElements(), num_parts_, &spans);
    OP_REQUIRES(ctx, parsed.ok(),
                ::tensorflow::errors::InvalidArgument("tlc: ", what_, ": ", parsed.message()));
    const Status sized =
        message::CheckPartSizes(spans, input.NumElements(), part_bytes_, item_bytes_);
    OP_REQUIRES(ctx, sized.ok(),
                ::tensorflow::errors::InvalidArgument("tlc: ", what_, ": ", sized.message()));
    for (int i = 0; i < num_parts_; ++i) {
      const int64_t values = static_cast<int64_t>(spans[i].length) / sizes_[i];
      OP_REQUIRES(ctx, values * sizes_[i] == static_cast<int64_t>(spans[i].length),
                  ::tensorflow::errors::InvalidArgument(
                      "tlc: ", what_, ": part ", i, " holds ", spans[i].length,
                      " bytes, not a whole number of ", ::tensorflow::DataTypeString(types_[i]),
                      " values"));
      TensorShape shape({values});
      if (!shapes_.empty() && shapes_[i].IsFullyDefined()) {
        OP_REQUIRES(ctx, shapes_[i].AsTensorShape(&shape),
                    ::tensorflow::errors::InvalidArgument("tlc: ", what_, ": part ", i,
                                                          ": bad shape"));
        OP_REQUIRES(ctx, shape.num_elements() == values,
                    ::tensorflow::errors::InvalidArgument(
                        "tlc: ", what_, ": part ", i, " holds ", values, " values, its shape ",
                        shape.DebugString(), " needs ", shape.num_elements()));
      }
      Tensor* out = nullptr;
      OP_REQUIRES_OK(ctx, ctx->allocate_output(i, shape, &out));
      if (spans[i].length == 0) continue;
      const uint8_t* from = data + spans[i].offset;
      if (types_[i] == ::tensorflow::DT_BOOL) {
        bool* to = out->flat<bool>().data();
        for (int64_t k = 0; k < values; ++k) to[k] = from[k] != 0;
      } else {
        std::memcpy(const_cast<char*>(out->tensor_data().data()), from, spans[i].length);
      }
    }
  }

 private:
  int num_parts_ = 0;
  std::vector<DataType> types_;
  std::vector<::tensorflow::PartialTensorShape> shapes_;
  std::vector<int64_t> sizes_;  // bytes of one value of each part
  std::string what_;
  std::vector<int64_t> part_bytes_;
  std::vector<int64_t> item_bytes_;
};

REGISTER_KERNEL_BUILDER(Name("TlcPackMessage").Device(::tensorflow::DEVICE_CPU), PackMessageOp);
REGISTER_KERNEL_BUILDER(Name("TlcUnpackMessage").Device(::tensorflow::DEVICE_CPU),
                        UnpackMessageOp);

}  // namespace
}  // namespace tlc
