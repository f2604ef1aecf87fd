// Op definitions for the 3LC codec. Kernels are in codec_kernels.cc, Python
// wrappers in tlc/ops.py, the byte format in docs/FORMAT.md.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tlc {

using Status = ::absl::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;

namespace {

Status VariableLengthBytes(InferenceContext* c) {
  c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
  return Status();
}

// Output 0 is a vector whose length is the scalar input `index`.
Status VectorOfScalarInput(InferenceContext* c, int index) {
  DimensionHandle n;
  TF_RETURN_IF_ERROR(c->MakeDimForScalarInput(index, &n));
  c->set_output(0, c->Vector(n));
  return Status();
}

// The scales: a scalar per tensor (block_size 0), else a vector of blocks.
Status ScalesShape(InferenceContext* c, int output) {
  int64_t block_size;
  TF_RETURN_IF_ERROR(c->GetAttr("block_size", &block_size));
  c->set_output(output, block_size == 0 ? c->Scalar() : c->Vector(InferenceContext::kUnknownDim));
  return Status();
}

}  // namespace

REGISTER_OP("TlcCompress3LC")
    .Input("x: float")
    .Input("error: float")
    .Input("sparsity_multiplier: float")
    .Output("code: uint8")
    .Output("m: float")
    .Output("new_error: float")
    .Attr("adaptive: bool = false")
    .Attr("block_size: int = 0")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      TF_RETURN_IF_ERROR(ScalesShape(c, 1));
      c->set_output(2, c->input(1));
      return Status();
    })
    .Doc("3LC compression with error feedback; new_error = x + error - m*q. m is one scale "
         "(block_size 0) or one per block of block_size values (docs/FORMAT.md).");

REGISTER_OP("TlcCompress3LCUpdateError")
    .Input("x: float")
    .Input("error: resource")
    .Input("sparsity_multiplier: float")
    .Output("code: uint8")
    .Output("m: float")
    .Attr("adaptive: bool = false")
    .Attr("block_size: int = 0")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      return ScalesShape(c, 1);
    })
    .Doc("3LC compression that updates a float32 resource variable's error buffer in place.");

REGISTER_OP("TlcDecompress3LC")
    .Input("code: uint8")
    .Input("m: float")
    .Input("num_elements: int64")
    .Output("values: float")
    .Attr("adaptive: bool = false")
    .Attr("block_size: int = 0")
    .SetShapeFn([](InferenceContext* c) { return VectorOfScalarInput(c, 2); })
    .Doc("Decodes a 3LC code into m*q.");

REGISTER_OP("TlcDecompress3LCAccumulate")
    .Input("base: float")
    .Input("code: uint8")
    .Input("m: float")
    .Output("values: float")
    .Attr("adaptive: bool = false")
    .Attr("block_size: int = 0")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return Status();
    })
    .Doc("base + m*q for the non-zero q; reuses base's buffer when it can.");

REGISTER_OP("TlcPackBase3")
    .Input("q: int8")
    .Output("packed: uint8")
    .SetShapeFn(VariableLengthBytes);

REGISTER_OP("TlcUnpackBase3")
    .Input("packed: uint8")
    .Input("n: int64")
    .Output("q: int8")
    .SetShapeFn([](InferenceContext* c) { return VectorOfScalarInput(c, 1); });

REGISTER_OP("TlcZreEncode")
    .Input("packed: uint8")
    .Output("code: uint8")
    .SetShapeFn(VariableLengthBytes);

REGISTER_OP("TlcZreDecode")
    .Input("code: uint8")
    .Input("n_bytes: int64")
    .Output("packed: uint8")
    .SetShapeFn([](InferenceContext* c) { return VectorOfScalarInput(c, 1); });

REGISTER_OP("TlcGolombEncode")
    .Input("positions: int64")
    .Input("b: int32")
    .Output("code: uint8")
    .SetShapeFn(VariableLengthBytes);

REGISTER_OP("TlcGolombDecode")
    .Input("code: uint8")
    .Input("b: int32")
    .Input("n: int64")
    .Output("positions: int64")
    .SetShapeFn(VariableLengthBytes);

REGISTER_OP("TlcGolombBstar")
    .Input("p: float64")
    .Output("b: int32")
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape);

}  // namespace tlc
