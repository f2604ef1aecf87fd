// numpy front end of the codec core: tlc.codec. No TensorFlow here.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../core/base3.h"
#include "../core/bitmask_simd.h"
#include "../core/golomb.h"
#include "../core/message.h"
#include "../core/threelc.h"
#include "../core/zero_run.h"
#include "thread_pool.h"

namespace py = pybind11;

namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using ByteArray = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

void Check(const tlc::Status& s) {
  if (!s.ok()) throw py::value_error(s.message());
}

// Runs tasks on the calling thread plus a process-wide pool.
tlc::Executor MakeExecutor(int num_threads) {
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  if (num_threads <= 0) num_threads = cores;
  // Leaked on purpose: joining threads during interpreter shutdown can hang.
  static tlc::ThreadPool* pool = new tlc::ThreadPool(std::max(cores, 8) - 1);
  tlc::Executor exec;
  exec.num_threads = num_threads;
  exec.run = [num_threads](int64_t n, const std::function<void(int64_t)>& task) {
    pool->Run(n, num_threads - 1, task);
  };
  return exec;
}

// A contiguous, writable float32 array that we may update in place.
py::array_t<float> InPlaceFloat(py::object obj, const char* name) {
  if (!py::isinstance<py::array_t<float>>(obj)) {
    throw py::value_error(std::string(name) + " must be a numpy float32 array");
  }
  auto arr = obj.cast<py::array_t<float>>();
  if (!(arr.flags() & py::array::c_style) || !arr.writeable()) {
    throw py::value_error(std::string(name) + " must be C-contiguous and writable");
  }
  return arr;
}

void CheckNonNegative(int64_t v, const char* name) {
  if (v < 0) throw py::value_error(std::string(name) + " must be >= 0, got " + std::to_string(v));
}

void CheckBlockSize(int64_t block_size) { Check(tlc::CheckBlockSize(block_size)); }

py::tuple Compress3LC(FloatArray x, py::object error_obj, double s, bool adaptive,
                      int num_threads, int64_t block_size) {
  py::array_t<float> error = InPlaceFloat(error_obj, "error");
  if (error.size() != x.size()) {
    throw py::value_error("error has " + std::to_string(error.size()) + " elements, x has " +
                          std::to_string(x.size()));
  }
  CheckBlockSize(block_size);
  tlc::Executor exec = MakeExecutor(num_threads);
  std::vector<uint8_t> code;
  py::array_t<float> scales(static_cast<py::ssize_t>(tlc::NumScales(x.size(), block_size)));
  float* scales_out = scales.mutable_data();
  tlc::Compress3LCResult result;
  tlc::Status status;
  {
    py::gil_scoped_release release;
    status = tlc::Compress3LC(
        x.data(), error.data(), error.mutable_data(), x.size(), static_cast<float>(s), block_size,
        adaptive, exec,
        [&](int64_t size) {
          code.resize(size);
          return code.data();
        },
        scales_out, &result);
  }
  Check(status);
  ByteArray out(static_cast<py::ssize_t>(code.size()));
  if (!code.empty()) std::memcpy(out.mutable_data(), code.data(), code.size());
  if (block_size == 0) {
    return py::make_tuple(out, py::module_::import("numpy").attr("float32")(result.m));
  }
  return py::make_tuple(out, scales);
}

// m as float32: a scalar per tensor, a 1-D array of block scales per block.
FloatArray Scales(py::object m, int64_t block_size) {
  FloatArray scales = FloatArray::ensure(m);
  if (!scales) throw py::value_error("m must be float32 scale(s)");
  if (block_size == 0 ? scales.ndim() != 0 : scales.ndim() != 1) {
    throw py::value_error(std::string("m must be a ") +
                          (block_size == 0 ? "scalar" : "1-D array of block scales") +
                          ", got " + std::to_string(scales.ndim()) + " dimensions");
  }
  return scales;
}

py::array_t<float> Decompress3LC(ByteArray code, py::object m, int64_t n, bool adaptive,
                                 int num_threads, int64_t block_size, py::object out_obj) {
  CheckNonNegative(n, "num_elements");
  if (n > (int64_t{1} << 40)) throw py::value_error("num_elements is absurdly large");
  CheckBlockSize(block_size);
  FloatArray scales = Scales(m, block_size);
  tlc::Executor exec = MakeExecutor(num_threads);
  // `out` (optional) is overwritten in place: no fresh n-element array per call.
  py::array_t<float> out = out_obj.is_none() ? py::array_t<float>(static_cast<py::ssize_t>(n))
                                             : InPlaceFloat(out_obj, "out");
  if (out.size() != n) {
    throw py::value_error("out has " + std::to_string(out.size()) + " elements, num_elements is " +
                          std::to_string(n));
  }
  tlc::Status status;
  {
    py::gil_scoped_release release;
    status = tlc::Decompress3LC(code.data(), code.size(), scales.data(), scales.size(), n,
                                block_size, adaptive, false, exec, out.mutable_data());
  }
  Check(status);
  return out;
}

void Decompress3LCAccumulate(ByteArray code, py::object m, py::object out_obj, bool adaptive,
                             int num_threads, int64_t block_size) {
  py::array_t<float> out = InPlaceFloat(out_obj, "out");
  CheckBlockSize(block_size);
  FloatArray scales = Scales(m, block_size);
  tlc::Executor exec = MakeExecutor(num_threads);
  tlc::Status status;
  {
    py::gil_scoped_release release;
    status = tlc::Decompress3LC(code.data(), code.size(), scales.data(), scales.size(),
                                out.size(), block_size, adaptive, true, exec, out.mutable_data());
  }
  Check(status);
}

ByteArray PackBase3(py::array_t<int8_t, py::array::c_style | py::array::forcecast> q) {
  ByteArray out(static_cast<py::ssize_t>(tlc::PackedSize(q.size())));
  Check(tlc::PackBase3(q.data(), q.size(), out.mutable_data()));
  return out;
}

py::array_t<int8_t> UnpackBase3(ByteArray packed, int64_t n) {
  CheckNonNegative(n, "n");
  if (packed.size() != tlc::PackedSize(n)) {
    throw py::value_error("unpack_base3: expected " + std::to_string(tlc::PackedSize(n)) +
                          " bytes for " + std::to_string(n) + " values, got " +
                          std::to_string(packed.size()));
  }
  py::array_t<int8_t> out(static_cast<py::ssize_t>(n));
  Check(tlc::UnpackBase3(packed.data(), packed.size(), n, out.mutable_data()));
  return out;
}

ByteArray ZreEncode(ByteArray bytes, int num_threads) {
  tlc::Executor exec = MakeExecutor(num_threads);
  std::vector<uint8_t> code;
  Check(tlc::ZreEncode(bytes.data(), bytes.size(), exec, [&](int64_t size) {
    code.resize(size);
    return code.data();
  }));
  ByteArray out(static_cast<py::ssize_t>(code.size()));
  if (!code.empty()) std::memcpy(out.mutable_data(), code.data(), code.size());
  return out;
}

ByteArray ZreDecode(ByteArray code, int64_t n_bytes, int num_threads) {
  CheckNonNegative(n_bytes, "n_bytes");
  if (n_bytes > (int64_t{1} << 40)) throw py::value_error("n_bytes is absurdly large");
  tlc::Executor exec = MakeExecutor(num_threads);
  ByteArray out(static_cast<py::ssize_t>(n_bytes));
  Check(tlc::ZreDecode(code.data(), code.size(), n_bytes, exec, out.mutable_data()));
  return out;
}

ByteArray GolombEncode(py::array_t<int64_t, py::array::c_style | py::array::forcecast> positions,
                       int b) {
  std::vector<uint8_t> code;
  Check(tlc::GolombEncode(positions.data(), positions.size(), b, &code));
  ByteArray out(static_cast<py::ssize_t>(code.size()));
  if (!code.empty()) std::memcpy(out.mutable_data(), code.data(), code.size());
  return out;
}

py::array_t<int64_t> GolombDecode(ByteArray code, int b, int64_t n) {
  CheckNonNegative(n, "n");
  std::vector<int64_t> positions;
  Check(tlc::GolombDecode(code.data(), code.size(), b, n, &positions));
  py::array_t<int64_t> out(static_cast<py::ssize_t>(positions.size()));
  if (!positions.empty()) {
    std::memcpy(out.mutable_data(), positions.data(), positions.size() * sizeof(int64_t));
  }
  return out;
}

int GolombBstar(double p) {
  int b;
  Check(tlc::GolombBstar(p, &b));
  return b;
}

// bytes' buffer, without a copy.
std::pair<const char*, size_t> BytesView(py::handle obj, const std::string& name) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (!PyBytes_Check(obj.ptr()) || PyBytes_AsStringAndSize(obj.ptr(), &data, &size) != 0) {
    PyErr_Clear();
    throw py::type_error(name + " must be bytes, got " +
                         std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  return {data, static_cast<size_t>(size)};
}

// One copy of each part, straight into the result's buffer.
py::bytes PackMessage(const py::sequence& parts) {
  const tlc::Status count = tlc::message::CheckPartCount(parts.size());
  if (!count.ok()) throw py::value_error("tlc: " + count.message());
  std::vector<py::object> keep(parts.size());  // holds each item while we read it
  std::vector<const uint8_t*> data(parts.size());
  std::vector<size_t> lengths(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    keep[i] = parts[i];
    const auto view = BytesView(keep[i], "pack_message: part " + std::to_string(i));
    data[i] = reinterpret_cast<const uint8_t*>(view.first);
    lengths[i] = view.second;
  }
  PyObject* out = PyBytes_FromStringAndSize(
      nullptr, static_cast<Py_ssize_t>(tlc::message::PackedSize(lengths)));
  if (out == nullptr) throw py::error_already_set();
  auto result = py::reinterpret_steal<py::bytes>(out);
  tlc::message::Pack(data, lengths, reinterpret_cast<uint8_t*>(PyBytes_AS_STRING(out)));
  return result;
}

// One allocation and copy per part; the message itself is not copied.
py::list UnpackMessage(const py::object& message, size_t num_parts, const std::string& what) {
  const auto view = BytesView(message, "unpack_message: message");
  std::vector<tlc::message::Span> spans;
  const tlc::Status s = tlc::message::Parse(reinterpret_cast<const uint8_t*>(view.first),
                                            view.second, num_parts, &spans);
  if (!s.ok()) throw py::value_error("tlc: " + what + ": " + s.message());
  py::list parts(spans.size());
  for (size_t i = 0; i < spans.size(); ++i) {
    parts[i] = py::bytes(view.first + spans[i].offset, spans[i].length);
  }
  return parts;
}

}  // namespace

PYBIND11_MODULE(_codec, m) {
  m.def("pack_message", &PackMessage, py::arg("parts"));
  m.def("unpack_message", &UnpackMessage, py::arg("message"), py::arg("num_parts"),
        py::arg("what"));
  m.doc() = "3LC codec core on numpy arrays (see docs/FORMAT.md).";
  m.def("compress_3lc", &Compress3LC, py::arg("x"), py::arg("error"),
        py::arg("sparsity_multiplier"), py::arg("adaptive") = false, py::arg("num_threads") = 0,
        py::arg("block_size") = 0,
        "a = x + error; quantize; error <- a - m*q in place; return (code uint8, m): m is a "
        "float32 scalar (block_size 0) or a float32 array of one scale per block.");
  m.def("decompress_3lc", &Decompress3LC, py::arg("code"), py::arg("m"), py::arg("num_elements"),
        py::arg("adaptive") = false, py::arg("num_threads") = 0, py::arg("block_size") = 0,
        py::arg("out") = py::none(),
        "Return m*q as float32 (written into `out` when given; on an error out is untouched).");
  m.def("decompress_3lc_accumulate", &Decompress3LCAccumulate, py::arg("code"), py::arg("m"),
        py::arg("out"), py::arg("adaptive") = false, py::arg("num_threads") = 0,
        py::arg("block_size") = 0,
        "out += m*q in place (elements with q == 0 are untouched).");
  m.def("pack_base3", &PackBase3, py::arg("q"));
  m.def("unpack_base3", &UnpackBase3, py::arg("packed"), py::arg("n"));
  m.def("zre_encode", &ZreEncode, py::arg("packed"), py::arg("num_threads") = 0);
  m.def("zre_decode", &ZreDecode, py::arg("code"), py::arg("n_bytes"), py::arg("num_threads") = 0);
  m.def("golomb_encode", &GolombEncode, py::arg("positions"), py::arg("b"));
  m.def("golomb_decode", &GolombDecode, py::arg("code"), py::arg("b"), py::arg("n"));
  m.def("golomb_bstar", &GolombBstar, py::arg("p"));
  // Benchmarks report it: the block quantizer's prefetch plan in use ("": undecided).
  m.def("block_prefetch_plan", [] { return std::string(tlc::BlockPrefetchPlan()); });
  // and the Golomb encoder's position lister ("avx512", "avx2", "avx2-no-pext", "portable").
  m.def("golomb_lister", [] { return std::string(tlc::GolombLister()); });
}
