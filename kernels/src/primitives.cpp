#include "primitives.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <vector>


#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"
#include "attention.h"
#include "primitive_parts.h"
#include "ops.h"
#include "qmm.h"
#include "recurrence.h"
#include "sampling.h"
#include "threads.h"

namespace cpu_kernels {

[[noreturn]] void refuse(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string("[cpu_kernels.") + op + "] " + what);
}

namespace {

// A CPU-only primitive whose work is `run(inputs, out)` on the stream, out freshly allocated
// and contiguous. The arrays travel with the task, so their buffers live until it has run.
class CpuPrimitive : public mx::UnaryPrimitive {
 public:
  using Run = std::function<void(const std::vector<mx::array>&, mx::array&)>;
  CpuPrimitive(mx::Stream stream, const char* name, std::vector<float> params, Run run)
      : mx::UnaryPrimitive(stream), name_(name), params_(std::move(params)), run_(std::move(run)) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto& encoder = mx::cpu::get_command_encoder(stream());
    for (auto& a : inputs) encoder.set_input_array(a);
    encoder.set_output_array(out);
    encoder.dispatch([inputs, out, run = run_]() {
      mx::array target = out;  // a handle to the same buffer, writable
      run(inputs, target);
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error(std::string("[cpu_kernels] ") + name_ + " has no GPU kernel");
  }
  const char* name() const override {
    return name_;
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const CpuPrimitive*>(&other);
    return o != nullptr && o->name_ == name_ && o->params_ == params_;
  }

 private:
  const char* name_;
  std::vector<float> params_;  // what tells two instances apart (for MLX's graph rewrites)
  Run run_;
};

}  // namespace

mx::Stream cpu_stream(const char* op, mx::StreamOrDevice s) {
  auto stream = mx::to_stream(s, mx::Device::cpu);
  if (stream.device != mx::Device::cpu) refuse(op, "runs on the CPU device only");
  return stream;
}

namespace {

mx::array make(
    mx::Shape shape,
    mx::Stream stream,
    const char* name,
    std::vector<float> params,
    CpuPrimitive::Run run,
    std::vector<mx::array> inputs,
    mx::Dtype dtype = mx::float32) {
  return mx::array(
      std::move(shape),
      dtype,
      std::make_shared<CpuPrimitive>(stream, name, std::move(params), std::move(run)),
      std::move(inputs));
}

}  // namespace

const float* dense(const mx::array& x, std::vector<float>& buffer) {
  if (x.flags().row_contiguous) return x.data<float>();
  buffer.resize(x.size());
  const float* base = x.data<float>();
  for (size_t i = 0; i < x.size(); i++) {
    int64_t offset = 0;
    size_t rest = i;
    for (int d = x.ndim() - 1; d >= 0; d--) {
      offset += int64_t(rest % x.shape(d)) * x.strides()[d];
      rest /= x.shape(d);
    }
    buffer[i] = base[offset];
  }
  return buffer.data();
}

void check_x_bytes(const char* op, int x_bytes) {
  if (x_bytes != 1 && x_bytes != 2) refuse(op, "x_bytes must be 1 or 2");
}

std::string k6_refusal(const mx::array& w, const mx::array& scales, const mx::array& biases, int K) {
  if (K % 256 != 0) return "Q6_K weights (bits 6) take a multiple of 256 in_features";
  mx::Shape per16 = w.shape(), per256 = w.shape();
  per16.back() = K / 16;
  per256.back() = K / 256;
  if (scales.dtype() != mx::int8 || scales.shape() != per16) {
    return "Q6_K's scales (bits 6) must be int8, one per 16 in_features";
  }
  if (biases.dtype() != mx::float16 || biases.shape() != per256) {
    return "Q6_K's super-block scales (bits 6, as biases) must be float16, one per 256 in_features";
  }
  if (!supports_k6(active_kernels())) return "Q6_K weights (bits 6) need AVX-512 VNNI, which this CPU lacks";
  return "";
}

bool is_x8(const mx::array& w) {
  return w.dtype() == mx::uint8;
}

int in_features(const mx::array& w, int bits) {
  return w.shape(-1) * (is_x8(w) ? 8 : 32) / bits;
}

std::string x8_refusal(const mx::array& w, int bits) {
  if (!is_x8(w)) return "";
  if (w.ndim() != 2 || (bits != 4 && bits != 8 && bits != 6)) return "uint8 weights (the x8 layout) must be one matrix of 4, 6 (Q6_K) or 8 bits";
  if (w.shape(0) % 8 != 0) return "uint8 weights (the x8 layout) must have a multiple of 8 out_features";
  if (x8_direct_for(active_kernels()) == nullptr) return "uint8 weights (the x8 layout) need the AVX-512 VNNI kernels, not in use here";
  return "";
}

ScaleType params_type(const mx::array& scales, int bits) {
  return bits == 6 ? ScaleType::F16 : scale_type(scales.dtype());
}

ScaleType scale_type(mx::Dtype dtype) {
  if (dtype == mx::float32) return ScaleType::F32;
  if (dtype == mx::float16) return ScaleType::F16;
  if (dtype == mx::bfloat16) return ScaleType::BF16;
  refuse("quantized_matmul", "scales and biases must be float32, float16 or bfloat16");
}

namespace {

mx::array f32(const mx::array& a, mx::Stream s) {
  return mx::astype(a, mx::float32, s);
}

// The weights' arrays (inputs from `first` on) as the products index them: dense rows.
void require_dense_weights(const std::vector<mx::array>& in, size_t first, const char* op) {
  for (size_t i = first; i < in.size(); i++) {
    if (!in[i].flags().row_contiguous) {
      throw std::runtime_error(std::string("[cpu_kernels.") + op + "] weights must be contiguous");
    }
  }
}

// What both quantized products check of their weights: a format the kernels take, w uint32
// with `ndim` axes (2: one matrix, 3: stacked), scales and biases shaped as w with
// in_features / group_size last (`layout` says so in the refusal), in one float dtype.
// Returns in_features.
int check_weights(const char* op, const mx::array& w, const mx::array& scales,
                  const mx::array& biases, int group_size, int bits, int ndim,
                  const char* layout) {
  if (!supported(bits, group_size) || (bits == 6 && ndim != 2)) {
    std::ostringstream msg;
    msg << "bits " << bits << " with group size " << group_size
        << " is not supported (bits 4 or 8; groups 32, 64 or 128; or Q6_K's bits 6 with group 16"
        << " for one matrix)";
    refuse(op, msg.str());
  }
  if ((w.dtype() != mx::uint32 && !(is_x8(w) && ndim == 2)) || w.ndim() != ndim) {
    refuse(op, "w must be a " + std::to_string(ndim) + "-D uint32 array" + (ndim == 2 ? " (or uint8: the x8 layout)" : ""));
  }
  const std::string x8_why = x8_refusal(w, bits);
  if (!x8_why.empty()) refuse(op, x8_why);
  const int K = in_features(w, bits);
  if (bits == 6) {
    const std::string why = k6_refusal(w, scales, biases, K);
    if (!why.empty()) refuse(op, why);
    return K;
  }
  mx::Shape params_shape = w.shape();
  params_shape.back() = K / group_size;
  if (scales.shape() != params_shape || biases.shape() != params_shape) {
    refuse(op, std::string("scales and biases must be ") + layout);
  }
  if (scales.dtype() != biases.dtype()) refuse(op, "scales and biases must share a dtype");
  scale_type(scales.dtype());
  return K;
}

}  // namespace

mx::array quantized_matmul(
    const mx::array& x,
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits,
    int x_bytes,
    mx::StreamOrDevice s) {
  const char* op = "quantized_matmul";
  check_x_bytes(op, x_bytes);
  const int K = check_weights(op, w, scales, biases, group_size, bits, 2,
                              "[out_features, in_features / group_size]");
  if (x.ndim() < 1) refuse(op, "x must have at least one dimension");
  const int N = w.shape(0);
  if (x.shape(-1) != K) {
    std::ostringstream msg;
    msg << "x has " << x.shape(-1) << " features but the weights take " << K;
    refuse(op, msg.str());
  }
  auto stream = cpu_stream(op, s);
  mx::Shape out_shape = x.shape();
  out_shape.back() = N;
  auto run = [group_size, bits, x_bytes](const std::vector<mx::array>& in, mx::array& out) {
    require_dense_weights(in, 1, "quantized_matmul");
    thread_local std::vector<float> gathered;
    int K = in[0].shape(-1);
    Problem p{
        dense(in[0], gathered),
        in[1].data<uint8_t>(),
        in[2].data<void>(),
        in[3].data<void>(),
        params_type(in[2], bits),
        out.data<float>(),
        int(in[0].size() / K),
        out.shape(-1),
        K,
        group_size,
        bits,
        x_bytes,
        is_x8(in[1])};
    if (p.M > 0 && p.N > 0) run_product(p, active_kernels());
  };
  return make(
      std::move(out_shape),
      stream,
      "CpuQuantizedMatmul",
      {float(group_size), float(bits), float(x_bytes)},
      run,
      {f32(x, stream), w, scales, biases});
}

namespace {

size_t scale_bytes(ScaleType t) {
  return t == ScaleType::F32 ? 4 : 2;
}

// The rows of x [R, K] through each row's expert of w [E, N, K * bits / 32] (scales, biases
// [E, N, K / group]) into out [R, N]: rows grouped by expert (a counting sort), each group one
// product, all of them run_gathered's. A row whose expert is out of range is left zero.
void gathered_products(const std::vector<mx::array>& in, mx::array& out, int group, int bits,
                       int x_bytes) {
  thread_local std::vector<float> gathered, xs, outs;
  const int K = in[0].shape(-1), R = in[0].shape(0);
  const int E = in[2].shape(0), N = in[2].shape(1);
  const float* x = dense(in[0], gathered);
  const int32_t* expert = in[1].data<int32_t>();
  std::vector<int> first(E + 1, 0), order(R);
  for (int r = 0; r < R; r++) {
    if (expert[r] >= 0 && expert[r] < E) first[expert[r] + 1]++;
  }
  for (int e = 0; e < E; e++) first[e + 1] += first[e];
  std::vector<int> next(first.begin(), first.end() - 1);
  for (int r = 0; r < R; r++) {
    if (expert[r] >= 0 && expert[r] < E) order[next[expert[r]]++] = r;
  }
  const int kept = first[E];
  xs.resize(size_t(kept) * K);
  outs.resize(size_t(kept) * N);
  for (int i = 0; i < kept; i++) {
    std::memcpy(xs.data() + size_t(i) * K, x + size_t(order[i]) * K, sizeof(float) * K);
  }
  const ScaleType type = scale_type(in[3].dtype());
  const size_t w_bytes = size_t(N) * K * bits / 8, s_bytes = size_t(N) * (K / group) * scale_bytes(type);
  std::vector<Problem> ps;
  for (int e = 0; e < E; e++) {
    const int m = first[e + 1] - first[e];
    if (m == 0) continue;
    ps.push_back({xs.data() + size_t(first[e]) * K, in[2].data<uint8_t>() + e * w_bytes,
                  in[3].data<uint8_t>() + e * s_bytes, in[4].data<uint8_t>() + e * s_bytes, type,
                  outs.data() + size_t(first[e]) * N, m, N, K, group, bits, x_bytes});
  }
  run_gathered(ps.data(), int(ps.size()), active_kernels());
  float* y = out.data<float>();
  std::memset(y, 0, out.nbytes());
  for (int i = 0; i < kept; i++) {
    std::memcpy(y + size_t(order[i]) * N, outs.data() + size_t(i) * N, sizeof(float) * N);
  }
}

}  // namespace

mx::array gather_quantized_matmul(
    const mx::array& x,
    const mx::array& experts,
    const mx::array& w,
    const mx::array& scales,
    const mx::array& biases,
    int group_size,
    int bits,
    int x_bytes,
    mx::StreamOrDevice s) {
  const char* op = "gather_quantized_matmul";
  check_x_bytes(op, x_bytes);
  const int K = check_weights(op, w, scales, biases, group_size, bits, 3,
                              "[experts, out_features, in_features / group_size]");
  const int N = w.shape(1);
  if (x.ndim() != 2 || x.shape(1) != K) refuse(op, "x must be [rows, in_features of w]");
  if (experts.ndim() != 1 || experts.shape(0) != x.shape(0)) {
    refuse(op, "experts must be 1-D, one per row of x");
  }
  if (!mx::issubdtype(experts.dtype(), mx::integer)) refuse(op, "experts must be integers");
  auto stream = cpu_stream(op, s);
  auto run = [group_size, bits, x_bytes](const std::vector<mx::array>& in, mx::array& out) {
    require_dense_weights(in, 2, "gather_quantized_matmul");
    if (in[0].size() > 0 && out.shape(-1) > 0) gathered_products(in, out, group_size, bits, x_bytes);
  };
  // The experts contiguous int32 (a 1-D copy at most: one index per row).
  auto index = mx::contiguous(mx::astype(experts, mx::int32, stream), false, stream);
  return make(
      {x.shape(0), N},
      stream,
      "CpuGatherQuantizedMatmul",
      {float(group_size), float(bits), float(x_bytes)},
      run,
      {f32(x, stream), index, w, scales, biases});
}

mx::array interleave8(const mx::array& a, int unit, mx::StreamOrDevice s) {
  const char* op = "interleave8";
  if (a.ndim() < 2 || a.shape(-2) % 8 != 0) refuse(op, "a must be [..., N, B] with N a multiple of 8");
  const size_t row = size_t(a.shape(-1)) * a.itemsize();
  if (unit < 1 || row % size_t(unit) != 0) refuse(op, "a row's bytes must be a multiple of unit");
  auto stream = cpu_stream(op, s);
  auto run = [unit](const std::vector<mx::array>& in, mx::array& out) {
    require_dense_weights(in, 0, "interleave8");
    const uint8_t* src = in[0].data<uint8_t>();
    uint8_t* dst = out.data<uint8_t>();
    const size_t bytes = size_t(in[0].shape(-1)) * in[0].itemsize(), units = bytes / unit;
    const size_t blocks = in[0].size() / in[0].shape(-1) / 8;
    // A load's one pass over every weight, on every core: MLX's strided copy took 0.7 s for a
    // 1.7B model's 1 GB.
    split(blocks, 8 * bytes, 1, [&](size_t b0, size_t b1) {
      for (size_t b = b0; b < b1; b++) {
        for (int r = 0; r < 8; r++) {
          const uint8_t* from = src + (b * 8 + r) * bytes;
          uint8_t* to = dst + b * 8 * bytes + size_t(r) * unit;
          for (size_t u = 0; u < units; u++) std::memcpy(to + u * 8 * unit, from + u * unit, unit);
        }
      }
    });
  };
  return make(a.shape(), stream, "CpuInterleave8", {float(unit)}, run, {mx::contiguous(a, false, stream)},
              a.dtype());
}

namespace {

// One column's Q6_K bytes (k6.h: per 128 values 64 bytes of low nibbles, 32 of top pairs) in
// the x8 layout's order of pieces (k6_vnni.cpp: per 64 values N0, N1, T of 16 bytes), each
// piece written where interleave8 would put it: `to` is the column's first piece in its block.
void k6_column_to_x8(const uint8_t* from, size_t bytes, uint8_t* to) {
  uint8_t codes[128];
  for (size_t at = 0, chunk = 0; at < bytes; at += 96, chunk += 2) {
    const uint8_t* nib = from + at;
    const uint8_t* top = nib + 64;
    for (int v = 0; v < 128; v++) {
      const int low = v < 64 ? nib[v] & 0x0f : nib[v - 64] >> 4;
      codes[v] = uint8_t(low | ((top[v % 32] >> (2 * (v / 32))) & 3) << 4);
    }
    for (int half = 0; half < 2; half++) {
      const uint8_t* c = codes + 64 * half;
      uint8_t* piece = to + (chunk + half) * 3 * 128;  // 3 pieces of 8 columns' 16 bytes
      for (int i = 0; i < 16; i++) {
        piece[i] = uint8_t((c[i] & 0x0f) | (c[16 + i] & 0x0f) << 4);
        piece[128 + i] = uint8_t((c[32 + i] & 0x0f) | (c[48 + i] & 0x0f) << 4);
        piece[256 + i] = uint8_t((c[i] >> 4) | (c[16 + i] >> 4) << 2 | (c[32 + i] >> 4) << 4 | (c[48 + i] >> 4) << 6);
      }
    }
  }
}

}  // namespace

mx::array k6_interleave8(const mx::array& w, mx::StreamOrDevice s) {
  const char* op = "k6_interleave8";
  if (w.ndim() != 2 || w.shape(0) % 8 != 0) refuse(op, "w must be [N, B] with N a multiple of 8");
  const size_t bytes = size_t(w.shape(1)) * w.itemsize();
  if (bytes % 192 != 0) refuse(op, "a row must hold a multiple of 256 Q6_K values (192 bytes)");
  auto stream = cpu_stream(op, s);
  auto run = [](const std::vector<mx::array>& in, mx::array& out) {
    require_dense_weights(in, 0, "k6_interleave8");
    const uint8_t* src = in[0].data<uint8_t>();
    uint8_t* dst = out.data<uint8_t>();
    const size_t bytes = size_t(in[0].shape(1)) * in[0].itemsize(), blocks = size_t(in[0].shape(0)) / 8;
    split(blocks, 8 * bytes, 1, [&](size_t b0, size_t b1) {
      for (size_t b = b0; b < b1; b++) {
        for (int r = 0; r < 8; r++) k6_column_to_x8(src + (b * 8 + r) * bytes, bytes, dst + b * 8 * bytes + size_t(r) * 16);
      }
    });
  };
  mx::Shape shape{w.shape(0), int(bytes)};
  return make(shape, stream, "CpuK6Interleave8", {}, run, {mx::contiguous(w, false, stream)}, mx::uint8);
}

namespace {

// Column `col` (0..7) of an x8 block of Q6_K (`block`: its first byte; `bytes` a column's) as
// float weights: per 64 values, N0 (values i, 16 + i), N1 (32 + i, 48 + i), T (top pairs),
// each a 16-byte unit at 128 * unit + 16 * col; scales and supers eight columns side by side.
void k6_x8_column(const uint8_t* block, size_t bytes, int col, const int8_t* scales,
                  const mx::float16_t* supers, int K, float* out) {
  for (int c = 0; c < K / 64; c++) {
    const uint8_t* n0 = block + 128 * (3 * c) + 16 * col;
    const uint8_t* n1 = n0 + 128;
    const uint8_t* top = n1 + 128;
    const float d = float(supers[(c / 4) * 8 + col]);
    float* o = out + 64 * c;
    for (int i = 0; i < 16; i++) {
      const int code[4] = {(n0[i] & 0x0f) | (top[i] & 3) << 4, (n0[i] >> 4) | (top[i] >> 2 & 3) << 4,
                           (n1[i] & 0x0f) | (top[i] >> 4 & 3) << 4, (n1[i] >> 4) | (top[i] >> 6) << 4};
      for (int q = 0; q < 4; q++) {
        const int v = 16 * q + i;
        o[v] = d * float(scales[(4 * c + q) * 8 + col]) * float(code[q] - 32);
      }
    }
  }
  (void)bytes;
}

}  // namespace

mx::array k6_x8_rows(const mx::array& w, const mx::array& scales, const mx::array& supers, const mx::array& ids,
                     mx::StreamOrDevice s) {
  const char* op = "k6_x8_rows";
  if (w.dtype() != mx::uint8 || w.ndim() != 2 || w.shape(0) % 8 != 0 || w.shape(1) % 192 != 0) {
    refuse(op, "w must be Q6_K's x8 layout: uint8 [N, K * 6 / 8], N a multiple of 8, K of 256");
  }
  const int K = w.shape(1) * 8 / 6;
  if (scales.dtype() != mx::int8 || scales.ndim() != 2 || scales.shape(0) != w.shape(0) || scales.shape(1) != K / 16) {
    refuse(op, "scales must be int8 [N, K / 16]");
  }
  if (supers.dtype() != mx::float16 || supers.ndim() != 2 || supers.shape(0) != w.shape(0) ||
      supers.shape(1) != K / 256) {
    refuse(op, "supers must be float16 [N, K / 256]");
  }
  if (!mx::issubdtype(ids.dtype(), mx::integer)) refuse(op, "ids must be integers");
  auto stream = cpu_stream(op, s);
  const int N = w.shape(0);
  auto run = [K, N](const std::vector<mx::array>& in, mx::array& out) {
    const uint8_t* base = in[0].data<uint8_t>();
    const int8_t* sc = in[1].data<int8_t>();
    const mx::float16_t* sup = in[2].data<mx::float16_t>();
    const int32_t* id = in[3].data<int32_t>();
    const size_t bytes = size_t(K) * 6 / 8, rows = in[3].size();
    float* o = out.data<float>();
    for (size_t r = 0; r < rows; r++) {
      const int n = std::clamp(id[r], 0, N - 1);  // as a gather's out-of-range index: no read outside
      const size_t b = size_t(n / 8);
      k6_x8_column(base + b * 8 * bytes, bytes, n % 8, sc + b * 8 * (K / 16), sup + b * 8 * (K / 256), K,
                   o + r * K);
    }
  };
  mx::Shape shape = ids.shape();
  shape.push_back(K);
  auto index = mx::contiguous(mx::astype(ids, mx::int32, stream), false, stream);
  return make(shape, stream, "CpuK6X8Rows", {}, run,
              {mx::contiguous(w, false, stream), mx::contiguous(scales, false, stream),
               mx::contiguous(supers, false, stream), index});
}

mx::array rms_norm(const mx::array& x, const mx::array& weight, float eps, mx::StreamOrDevice s) {
  const char* op = "rms_norm";
  if (x.ndim() < 1 || weight.ndim() != 1 || weight.shape(0) != x.shape(-1)) {
    refuse(op, "weight must be 1-D with x's last dimension");
  }
  auto stream = cpu_stream(op, s);
  auto run = [eps](const std::vector<mx::array>& in, mx::array& out) {
    thread_local std::vector<float> gx, gw;
    int dim = in[0].shape(-1);
    const float* x = dense(in[0], gx);
    const float* w = dense(in[1], gw);
    rms_norm_f32(x, w, out.data<float>(), in[0].size() / dim, dim, eps);
  };
  return make(x.shape(), stream, "CpuRMSNorm", {eps}, run, {f32(x, stream), f32(weight, stream)});
}

namespace {

void check_gated_delta(const mx::array& q, const mx::array& k, const mx::array& v,
                       const mx::array& g, const mx::array& beta, const mx::array& state,
                       const std::optional<mx::array>& mask) {
  const char* op = "gated_delta";
  if (q.ndim() != 4 || k.shape() != q.shape() || v.ndim() != 4) {
    refuse(op, "q and k must be [B, T, Hk, Dk] alike, v [B, T, Hv, Dv]");
  }
  const int B = q.shape(0), T = q.shape(1), Hk = q.shape(2), Hv = v.shape(2);
  if (v.shape(0) != B || v.shape(1) != T || Hk == 0 || Hv % Hk != 0) {
    refuse(op, "v must share q's B and T, with a multiple of its heads");
  }
  if (g.shape() != mx::Shape{B, T, Hv} || beta.shape() != g.shape()) {
    refuse(op, "g and beta must be [B, T, Hv] (one gate per value head)");
  }
  if (state.shape() != mx::Shape{B, Hv, v.shape(3), q.shape(3)}) {
    refuse(op, "state must be [B, Hv, Dv, Dk]");
  }
  if (mask && mask->shape() != mx::Shape{B, T}) refuse(op, "mask must be [B, T]");
}

}  // namespace

mx::array gated_delta(const mx::array& q, const mx::array& k, const mx::array& v,
                      const mx::array& g, const mx::array& beta, const mx::array& state,
                      const std::optional<mx::array>& mask, mx::StreamOrDevice s) {
  check_gated_delta(q, k, v, g, beta, state, mask);
  auto stream = cpu_stream("gated_delta", s);
  auto run = [](const std::vector<mx::array>& in, mx::array& out) {
    thread_local std::vector<float> bq, bk, bv, bg, bb, bs;
    const auto& q = in[0];
    const auto& v = in[2];
    GatedDelta p{q.shape(0), q.shape(1), q.shape(2), v.shape(2), q.shape(3), v.shape(3),
                 dense(in[0], bq), dense(in[1], bk), dense(in[2], bv), dense(in[3], bg),
                 dense(in[4], bb), dense(in[5], bs), nullptr, nullptr, nullptr};
    thread_local std::vector<uint8_t> bm;
    if (in.size() > 6) {  // the mask as one byte a step, whatever its layout
      const auto& m = in[6];
      bm.resize(m.size());
      const bool* base = m.data<bool>();
      for (size_t i = 0; i < m.size(); i++) {
        const size_t b = i / m.shape(1), t = i % m.shape(1);
        bm[i] = base[b * m.strides()[0] + t * m.strides()[1]] ? 1 : 0;
      }
      p.mask = bm.data();
    }
    p.state_out = out.data<float>();
    p.y = p.state_out + in[5].size();
    gated_delta_f32(p);
  };
  std::vector<mx::array> inputs;
  for (const auto* a : {&q, &k, &v, &g, &beta, &state}) {
    // q, k and v come split from one projection: copied dense by MLX, not element by element
    inputs.push_back(mx::contiguous(f32(*a, stream), false, stream));
  }
  if (mask) inputs.push_back(mx::astype(*mask, mx::bool_, stream));
  const int values = int(state.size() + v.size());
  return make({values}, stream, "CpuGatedDelta", {}, run, std::move(inputs));
}

mx::array depthwise_conv1d(const mx::array& x, const mx::array& w, int padding,
                           mx::StreamOrDevice s) {
  const char* op = "depthwise_conv1d";
  if (x.ndim() != 3 || w.ndim() != 3 || w.shape(2) != 1 || w.shape(0) != x.shape(2)) {
    refuse(op, "x must be [B, L, C] and w [C, K, 1] (one filter per channel)");
  }
  const int out_len = x.shape(1) + 2 * padding - w.shape(1) + 1;
  if (padding < 0 || out_len < 1) refuse(op, "x is shorter than the filter");
  auto stream = cpu_stream(op, s);
  auto run = [padding](const std::vector<mx::array>& in, mx::array& out) {
    thread_local std::vector<float> bx, bw;
    const auto& x = in[0];
    DepthwiseConv p{x.shape(0), x.shape(1), x.shape(2), int(in[1].shape(1)), padding,
                    dense(in[0], bx), dense(in[1], bw), out.data<float>()};
    depthwise_conv1d_f32(p);
  };
  return make({x.shape(0), out_len, x.shape(2)}, stream, "CpuDepthwiseConv1d",
              {float(padding)}, run,
              {mx::contiguous(f32(x, stream), false, stream), f32(w, stream)});
}

mx::array swiglu(const mx::array& gate, const mx::array& up, mx::StreamOrDevice s) {
  if (gate.shape() != up.shape()) refuse("swiglu", "gate and up must have one shape");
  auto stream = cpu_stream("swiglu", s);
  auto run = [](const std::vector<mx::array>& in, mx::array& out) {
    thread_local std::vector<float> gg, gu;
    swiglu_f32(dense(in[0], gg), dense(in[1], gu), out.data<float>(), out.size());
  };
  return make(gate.shape(), stream, "CpuSwiGLU", {}, run, {f32(gate, stream), f32(up, stream)});
}

namespace {

// What rope_f32 needs of the evaluated inputs (x, offsets, optional frequencies).
Rope rope_args(const std::vector<mx::array>& in, int dims, bool traditional, float base,
               float scale, std::vector<int32_t>& offsets, std::vector<float>& freqs) {
  const mx::array& x = in[0];
  const bool four = x.ndim() == 4;
  Rope r{};
  r.batch = x.shape(0);
  r.heads = four ? x.shape(1) : 1;
  r.length = x.shape(-2);
  r.dim = x.shape(-1);
  r.dims = dims;
  r.strides[0] = x.strides()[0];
  r.strides[1] = four ? x.strides()[1] : 0;
  r.strides[2] = x.strides()[x.ndim() - 2];
  r.strides[3] = x.strides()[x.ndim() - 1];
  const mx::array& o = in[1];
  const int64_t step = o.ndim() ? o.strides()[0] : 0;
  offsets.resize(o.size());
  for (size_t i = 0; i < o.size(); i++) offsets[i] = o.data<int32_t>()[i * step];
  r.offsets = offsets.data();
  r.offset_count = int(o.size());
  r.traditional = traditional;
  r.base = base;
  r.scale = scale;
  r.freqs = in.size() > 2 ? dense(in[2], freqs) : nullptr;
  return r;
}

}  // namespace

mx::array rope(
    const mx::array& x,
    int dims,
    bool traditional,
    std::optional<float> base,
    float scale,
    const mx::array& offset,
    const std::optional<mx::array>& freqs,
    mx::StreamOrDevice s) {
  const char* op = "rope";
  if (x.ndim() < 3 || x.ndim() > 4) refuse(op, "x must be [B, L, D] or [B, H, L, D]");
  if (dims <= 0 || dims % 2 || dims > x.shape(-1)) refuse(op, "dims must be even and <= D");
  if (base.has_value() == freqs.has_value()) refuse(op, "give exactly one of base and freqs");
  if (freqs && (freqs->ndim() != 1 || freqs->shape(0) != dims / 2)) {
    refuse(op, "freqs must have dims / 2 values");
  }
  if (offset.ndim() > 1 || (offset.size() != 1 && offset.size() != size_t(x.shape(0)))) {
    refuse(op, "offset must be one value or one per batch row");
  }
  auto stream = cpu_stream(op, s);
  std::vector<mx::array> inputs{f32(x, stream), mx::astype(offset, mx::int32, stream)};
  if (freqs) inputs.push_back(f32(*freqs, stream));
  auto run = [dims, traditional, base, scale](const std::vector<mx::array>& in, mx::array& out) {
    thread_local std::vector<int32_t> offsets;
    thread_local std::vector<float> freqs;
    Rope r = rope_args(in, dims, traditional, base.value_or(0.0f), scale, offsets, freqs);
    rope_f32(r, in[0].data<float>(), out.data<float>());
  };
  std::vector<float> params{float(dims), float(traditional), base.value_or(-1.0f), scale};
  return make(x.shape(), stream, "CpuRoPE", params, run, std::move(inputs));
}

namespace {

// An array whose last axis is contiguous, as the attention kernels read it: itself, or its
// values gathered row-major into `buffer`. Strides in bytes, for its first three axes.
const uint8_t* rows_view(const mx::array& a, int64_t* strides, std::vector<uint8_t>& buffer) {
  const int64_t item = int64_t(a.itemsize());
  if (a.strides()[3] == 1 || a.shape(3) == 1) {
    for (int d = 0; d < 3; d++) strides[d] = a.strides()[d] * item;
    return a.data<uint8_t>();
  }
  buffer.resize(a.nbytes());
  const uint8_t* base = a.data<uint8_t>();
  for (size_t i = 0; i < a.size(); i++) {
    int64_t offset = 0;
    size_t rest = i;
    for (int d = 3; d >= 0; d--) {
      offset += int64_t(rest % a.shape(d)) * a.strides()[d];
      rest /= a.shape(d);
    }
    std::memcpy(buffer.data() + i * item, base + offset * item, item);
  }
  strides[2] = a.shape(3) * item;
  strides[1] = strides[2] * a.shape(2);
  strides[0] = strides[1] * a.shape(1);
  return buffer.data();
}

ParamType param_type(mx::Dtype dtype) {
  if (dtype == mx::float32) return ParamType::F32;
  if (dtype == mx::float16) return ParamType::F16;
  if (dtype == mx::bfloat16) return ParamType::BF16;
  refuse("quantized_attention", "scales and biases must be float32, float16 or bfloat16");
}

// The mask's input (appended to `inputs`) and kind; "causal" needs no input.
MaskKind attention_mask(const char* op, const std::variant<std::monostate, std::string, mx::array>& mask,
                        int B, int Hq, int L, int S, mx::Stream stream,
                        std::vector<mx::array>& inputs) {
  if (std::holds_alternative<std::string>(mask)) {
    if (std::get<std::string>(mask) != "causal") refuse(op, "a string mask must be \"causal\"");
    if (L > S) refuse(op, "a causal mask needs at least as many keys as queries");
    return MaskKind::Causal;
  }
  if (!std::holds_alternative<mx::array>(mask)) return MaskKind::None;
  const auto& m = std::get<mx::array>(mask);
  MaskKind kind = m.dtype() == mx::bool_ ? MaskKind::Bool : MaskKind::Additive;
  auto typed = kind == MaskKind::Bool ? m : f32(m, stream);
  inputs.push_back(mx::broadcast_to(typed, {B, Hq, L, S}, stream));
  return kind;
}

// The parts of Attend every kind of K/V shares: q, shapes, scale, the mask (inputs[mask_at]).
Attend attend_args(const std::vector<mx::array>& in, float scale, MaskKind kind, size_t mask_at,
                   std::vector<uint8_t>& q_buffer) {
  Attend a{};
  a.batch = in[0].shape(0);
  a.q_heads = in[0].shape(1);
  a.length = in[0].shape(2);
  a.scale = scale;
  int64_t strides[3];
  a.q = reinterpret_cast<const float*>(rows_view(in[0], strides, q_buffer));
  for (int d = 0; d < 3; d++) a.q_strides[d] = strides[d] / int64_t(sizeof(float));
  a.mask_kind = kind;
  if (in.size() > mask_at) {
    a.mask = in[mask_at].data<void>();
    for (int d = 0; d < 4; d++) a.mask_strides[d] = in[mask_at].strides()[d];
  }
  return a;
}

}  // namespace

KVSide plain_side(const mx::array& x, std::vector<uint8_t>& buffer) {
  KVSide s{};
  s.format = x.dtype() == mx::float16 ? KVFormat::F16 : KVFormat::F32;
  s.dim = x.shape(3);
  s.data = rows_view(x, s.strides, buffer);
  return s;
}

namespace {

KVSide quantized_side(const mx::array& w, const mx::array& scales, const mx::array& biases,
                      int group, int bits, std::vector<uint8_t>* buffers) {
  KVSide s{};
  s.format = bits == 8 ? KVFormat::Q8 : KVFormat::Q4;
  s.dim = w.shape(3) * 32 / bits;
  s.data = rows_view(w, s.strides, buffers[0]);
  s.scales = rows_view(scales, s.scale_strides, buffers[1]);
  s.biases = rows_view(biases, s.bias_strides, buffers[2]);
  s.param_type = param_type(scales.dtype());
  s.group = group;
  return s;
}

mx::array kv_input(const mx::array& x, mx::Stream stream) {
  return x.dtype() == mx::float16 ? x : f32(x, stream);
}

}  // namespace

mx::array attention(
    const mx::array& q,
    const mx::array& k,
    const mx::array& v,
    float scale,
    const std::variant<std::monostate, std::string, mx::array>& mask,
    mx::StreamOrDevice s) {
  const char* op = "attention";
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4) refuse(op, "q, k and v must be 4-D");
  int B = q.shape(0), Hq = q.shape(1), L = q.shape(2), D = q.shape(3);
  int Hkv = k.shape(1), S = k.shape(2);
  if (k.shape(0) != B || v.shape(0) != B || v.shape(1) != Hkv || v.shape(2) != S ||
      k.shape(3) != D || Hkv == 0 || Hq % Hkv != 0) {
    refuse(op, "shapes must be q [B, Hq, L, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv]");
  }
  auto stream = cpu_stream(op, s);
  std::vector<mx::array> inputs{f32(q, stream), kv_input(k, stream), kv_input(v, stream)};
  MaskKind kind = attention_mask(op, mask, B, Hq, L, S, stream, inputs);
  auto run = [scale, kind](const std::vector<mx::array>& in, mx::array& out) {
    thread_local std::vector<uint8_t> buffers[3];
    Attend a = attend_args(in, scale, kind, 3, buffers[0]);
    a.kv_heads = in[1].shape(1);
    a.keys = in[1].shape(2);
    a.k = plain_side(in[1], buffers[1]);
    a.v = plain_side(in[2], buffers[2]);
    attend(a, out.data<float>());
  };
  return make(
      {B, Hq, L, v.shape(3)}, stream, "CpuAttention", {scale, float(kind)}, run, std::move(inputs));
}

mx::array quantized_attention(
    const mx::array& q,
    const mx::array& k,
    const mx::array& k_scales,
    const mx::array& k_biases,
    const mx::array& v,
    const mx::array& v_scales,
    const mx::array& v_biases,
    float scale,
    const std::variant<std::monostate, std::string, mx::array>& mask,
    int group_size,
    int bits,
    mx::StreamOrDevice s) {
  const char* op = "quantized_attention";
  if (bits != 4 && bits != 8) refuse(op, "bits must be 4 or 8");
  if (group_size != 32 && group_size != 64 && group_size != 128) {
    refuse(op, "group_size must be 32, 64 or 128");
  }
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4) refuse(op, "q, k and v must be 4-D");
  if (k.dtype() != mx::uint32 || v.dtype() != mx::uint32) refuse(op, "k and v must be uint32");
  int B = q.shape(0), Hq = q.shape(1), L = q.shape(2), D = q.shape(3);
  int Hkv = k.shape(1), S = k.shape(2), Dv = v.shape(3) * 32 / bits;
  if (k.shape(0) != B || v.shape(0) != B || v.shape(1) != Hkv || v.shape(2) != S ||
      k.shape(3) * 32 / bits != D || Hkv == 0 || Hq % Hkv != 0 || D % group_size ||
      Dv % group_size) {
    refuse(op, "shapes must be q [B, Hq, L, D], k packed [B, Hkv, S, D * bits / 32], "
               "v [B, Hkv, S, Dv * bits / 32], D and Dv multiples of group_size");
  }
  for (const auto* p : {&k_scales, &k_biases, &v_scales, &v_biases}) {
    const auto& side = (p == &k_scales || p == &k_biases) ? k : v;
    mx::Shape want{B, Hkv, S, side.shape(3) * 32 / bits / group_size};
    if (p->shape() != want) refuse(op, "scales and biases must be [B, Hkv, S, dim / group_size]");
    if (p->dtype() != k_scales.dtype()) refuse(op, "scales and biases must share a dtype");
  }
  param_type(k_scales.dtype());
  auto stream = cpu_stream(op, s);
  std::vector<mx::array> inputs{f32(q, stream), k, k_scales, k_biases, v, v_scales, v_biases};
  MaskKind kind = attention_mask(op, mask, B, Hq, L, S, stream, inputs);
  auto run = [scale, kind, group_size, bits](const std::vector<mx::array>& in, mx::array& out) {
    thread_local std::vector<uint8_t> buffers[7];
    Attend a = attend_args(in, scale, kind, 7, buffers[0]);
    a.kv_heads = in[1].shape(1);
    a.keys = in[1].shape(2);
    a.k = quantized_side(in[1], in[2], in[3], group_size, bits, buffers + 1);
    a.v = quantized_side(in[4], in[5], in[6], group_size, bits, buffers + 4);
    attend(a, out.data<float>());
  };
  return make(
      {B, Hq, L, Dv}, stream, "CpuQuantizedAttention",
      {scale, float(kind), float(group_size), float(bits)}, run, std::move(inputs));
}

mx::array sample_rows(const mx::array& logits, const mx::array& params, mx::StreamOrDevice s) {
  const char* op = "sample_rows";
  if (logits.ndim() != 2) refuse(op, "logits must be [rows, vocabulary]");
  if (params.ndim() != 2 || params.shape(0) != logits.shape(0) || params.shape(1) != ROW_PARAMS) {
    refuse(op, "params must be [rows, 5]: inverse temperature, top_p, min_p, top_k, uniform");
  }
  auto stream = cpu_stream(op, s);
  auto run = [](const std::vector<mx::array>& in, mx::array& out) {
    thread_local std::vector<float> gl, gp;
    const size_t rows = size_t(in[0].shape(0)), vocab = size_t(in[0].shape(1));
    if (vocab == 0) {
      std::fill_n(out.data<int32_t>(), rows, 0);
      return;
    }
    sample_rows_f32(dense(in[0], gl), dense(in[1], gp), out.data<int32_t>(), rows, vocab);
  };
  return make(
      {logits.shape(0)},
      stream,
      "CpuSampleRows",
      {},
      run,
      {f32(logits, stream), f32(params, stream)},
      mx::int32);
}

mx::array top_k_indices(const mx::array& logits, int k, mx::StreamOrDevice s) {
  const char* op = "top_k_indices";
  if (logits.ndim() != 2) refuse(op, "logits must be [rows, vocabulary]");
  if (k < 1 || k > logits.shape(1)) refuse(op, "k must be in [1, vocabulary]");
  auto stream = cpu_stream(op, s);
  auto run = [k](const std::vector<mx::array>& in, mx::array& out) {
    thread_local std::vector<float> gl;
    const size_t rows = size_t(in[0].shape(0)), vocab = size_t(in[0].shape(1));
    top_k_indices_f32(dense(in[0], gl), out.data<int32_t>(), rows, vocab, size_t(k));
  };
  return make(
      {logits.shape(0), k},
      stream,
      "CpuTopKIndices",
      {float(k)},
      run,
      {f32(logits, stream)},
      mx::int32);
}

}  // namespace cpu_kernels
