#include "layer.h"

#include <cstring>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"
#include "mlx/primitives.h"
#include "ops.h"
#include "primitive_parts.h"

namespace cpu_kernels {

namespace {

// A CPU primitive as primitives.cpp's, except that its output may take over input `donor`'s
// buffer, as MLX's slice update does: when nothing else holds that input (is_donatable) and it
// is laid out as the output is. `run` is told which happened (else it must fill every value).
class FusedPrimitive : public mx::UnaryPrimitive {
 public:
  using Run = std::function<void(const std::vector<mx::array>&, mx::array&, bool donated)>;
  FusedPrimitive(mx::Stream stream, const char* name, std::vector<float> params, Run run,
                 int donor = -1)
      : mx::UnaryPrimitive(stream),
        name_(name),
        params_(std::move(params)),
        run_(std::move(run)),
        donor_(donor) {}

  void eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) override {
    bool donated = false;
    if (donor_ >= 0) {
      const mx::array& d = inputs[donor_];
      donated = d.is_donatable() && d.flags().row_contiguous && d.dtype() == out.dtype() &&
          d.size() == out.size();
    }
    if (donated) {
      out.copy_shared_buffer(inputs[donor_]);
    } else {
      out.set_data(mx::allocator::malloc(out.nbytes()));
    }
    auto& encoder = mx::cpu::get_command_encoder(stream());
    for (auto& a : inputs) encoder.set_input_array(a);
    encoder.set_output_array(out);
    encoder.dispatch([inputs, out, donated, run = run_]() {
      mx::array target = out;
      run(inputs, target, donated);
    });
  }
  void eval_gpu(const std::vector<mx::array>&, mx::array&) override {
    throw std::runtime_error(std::string("[cpu_kernels] ") + name_ + " has no GPU kernel");
  }
  const char* name() const override {
    return name_;
  }
  bool is_equivalent(const mx::Primitive& other) const override {
    auto* o = dynamic_cast<const FusedPrimitive*>(&other);
    return o != nullptr && o->name_ == name_ && o->params_ == params_;
  }

 private:
  const char* name_;
  std::vector<float> params_;
  Run run_;
  int donor_;
};

mx::array f32(const mx::array& a, mx::Stream s) {
  return mx::astype(a, mx::float32, s);
}

// Refuses a linear layer the product cannot take, or one that does not take `in_features`.
void check_linear(const char* op, const Linear& l, int in_features, const char* which) {
  std::ostringstream msg;
  msg << which << ": ";
  if (!supported(l.bits, l.group_size)) {
    msg << "bits " << l.bits << " with group size " << l.group_size << " is not supported";
    refuse(op, msg.str());
  }
  if ((l.w.dtype() != mx::uint32 && !is_x8(l.w)) || l.w.ndim() != 2) refuse(op, msg.str() + "w must be 2-D uint32 (or uint8: the x8 layout)");
  const std::string x8_why = x8_refusal(l.w, l.bits);
  if (!x8_why.empty()) refuse(op, msg.str() + x8_why);
  int K = cpu_kernels::in_features(l.w, l.bits);
  if (K != in_features) {
    msg << "takes " << K << " features, given " << in_features;
    refuse(op, msg.str());
  }
  if (l.bits == 6) {
    const std::string why = k6_refusal(l.w, l.scales, l.biases, K);
    if (!why.empty()) refuse(op, msg.str() + why);
    check_x_bytes(op, l.x_bytes);
    return;
  }
  mx::Shape params{l.w.shape(0), K / l.group_size};
  if (l.scales.shape() != params || l.biases.shape() != params ||
      l.scales.dtype() != l.biases.dtype()) {
    refuse(op, msg.str() + "scales and biases must be [out, in / group_size], of one dtype");
  }
  scale_type(l.scales.dtype());
  check_x_bytes(op, l.x_bytes);
}

void push_linear(std::vector<mx::array>& inputs, const Linear& l) {
  inputs.insert(inputs.end(), {l.w, l.scales, l.biases});
}

// out[M, N] = x[M, K] @ W.T for the evaluated (w, scales, biases) at in[at..at+2].
Problem problem(const std::vector<mx::array>& in, size_t at, int group, int bits, int x_bytes,
                const float* x, int M, float* out) {
  for (size_t i = at; i < at + 3; i++) {
    if (!in[i].flags().row_contiguous) {
      throw std::runtime_error("[cpu_kernels] weights must be contiguous");
    }
  }
  const int K = in_features(in[at], bits);
  return Problem{x, in[at].data<uint8_t>(), in[at + 1].data<void>(), in[at + 2].data<void>(),
                 params_type(in[at + 1], bits), out, M, in[at].shape(0), K, group, bits, x_bytes,
                 is_x8(in[at])};
}

void product(const std::vector<mx::array>& in, size_t at, int group, int bits, int x_bytes,
             const float* x, int M, float* out) {
  Problem p = problem(in, at, group, bits, x_bytes, x, M, out);
  if (p.M > 0 && p.N > 0) run_product(p, active_kernels());
}

// RoPE of y [B, L, H, D] row-major (a projection's output) read as [B, H, L, D].
Rope rope_of(const RopeSpec& spec, const mx::array& o, std::vector<int32_t>& offsets, int B,
             int H, int L, int D) {
  Rope r{};
  r.batch = B;
  r.heads = H;
  r.length = L;
  r.dim = D;
  r.dims = spec.dims;
  r.strides[0] = int64_t(L) * H * D;
  r.strides[1] = D;
  r.strides[2] = int64_t(H) * D;
  r.strides[3] = 1;
  const int64_t step = o.ndim() ? o.strides()[0] : 0;
  offsets.resize(o.size());
  for (size_t i = 0; i < o.size(); i++) offsets[i] = o.data<int32_t>()[i * step];
  r.offsets = offsets.data();
  r.offset_count = int(o.size());
  r.traditional = spec.traditional;
  r.base = spec.base;
  r.scale = spec.scale;
  r.freqs = nullptr;
  return r;
}

// y [B, L, H, D] as [B, H, L, D] contiguous in `out`: rotated when the spec has dims.
void heads_first(const RopeSpec& spec, const mx::array& offset, const float* y, int B, int H,
                 int L, int D, float* out) {
  thread_local std::vector<int32_t> offsets;
  if (spec.dims > 0) return rope_f32(rope_of(spec, offset, offsets, B, H, L, D), y, out);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < H; h++) {
      for (int l = 0; l < L; l++) {
        const float* src = y + ((size_t(b) * L + l) * H + h) * D;
        std::memcpy(out + ((size_t(b) * H + h) * L + l) * D, src, sizeof(float) * D);
      }
    }
  }
}

// A head norm's weight checked against the head size, as decoder_layer and project_kv take it.
void check_head_norm(const char* op, const HeadNorm& n, int D) {
  if (n.weight && (n.weight->ndim() != 1 || n.weight->shape(0) != D)) {
    refuse(op, "a head norm's weight must be [head size]");
  }
}

// y [M, H * D] with each head's D values RMS-normalized (the weight at in[at]) when the layer
// has a head norm, as mlx-lm's q_norm / k_norm on the reshaped projection; else y itself.
const float* head_normed(const std::vector<mx::array>& in, int at, float eps, const float* y,
                         size_t rows, int D, std::vector<float>& out) {
  if (at < 0) return y;
  thread_local std::vector<float> gw;
  out.resize(rows * D);
  rms_norm_f32(y, dense(in[at], gw), out.data(), rows, D, eps);
  return out.data();
}

// Every value of a 4-D array into `out`, row-major.
void copy_dense(const mx::array& in, uint8_t* out) {
  const size_t item = in.itemsize();
  if (in.flags().row_contiguous) {
    std::memcpy(out, in.data<uint8_t>(), in.nbytes());
    return;
  }
  const uint8_t* base = in.data<uint8_t>();
  const auto& st = in.strides();
  const int D = in.shape(3);
  for (int b = 0; b < in.shape(0); b++) {
    for (int h = 0; h < in.shape(1); h++) {
      for (int s = 0; s < in.shape(2); s++) {
        const uint8_t* src = base + (b * st[0] + h * st[1] + s * st[2]) * int64_t(item);
        for (int d = 0; d < D; d++, out += item) std::memcpy(out, src + d * st[3] * item, item);
      }
    }
  }
}

// Rows [B, H, L, D] (float32, contiguous) into positions [start, start + L) of a row-major
// cache [B, H, S, D] of float16 or float32, cast as MLX's astype casts.
void write_rows(const float* rows, mx::array& cache, int L, int start) {
  const int B = cache.shape(0), H = cache.shape(1), S = cache.shape(2), D = cache.shape(3);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < H; h++) {
      const size_t at = (size_t(b) * H + h) * S + start;
      const float* src = rows + (size_t(b) * H + h) * L * size_t(D);
      const size_t n = size_t(L) * D;
      if (cache.dtype() == mx::float32) {
        std::memcpy(cache.data<float>() + at * D, src, sizeof(float) * n);
      } else {
        mx::float16_t* dst = cache.data<mx::float16_t>() + at * D;
        for (size_t i = 0; i < n; i++) dst[i] = static_cast<mx::float16_t>(src[i]);
      }
    }
  }
}

}  // namespace

mx::array project_kv(
    const mx::array& x,
    const mx::array& norm_weight,
    float eps,
    const Linear& proj,
    const mx::array& cache,
    int start,
    const mx::array& offset,
    const RopeSpec& rope,
    const HeadNorm& head_norm,
    mx::StreamOrDevice s) {
  const char* op = "project_kv";
  if (x.ndim() != 3 || cache.ndim() != 4) refuse(op, "x must be [B, L, D], cache [B, H, S, D]");
  const int B = x.shape(0), L = x.shape(1), Din = x.shape(2);
  const int H = cache.shape(1), D = cache.shape(3);
  if (cache.dtype() != mx::float16 && cache.dtype() != mx::float32) {
    refuse(op, "the cache must be float16 or float32");
  }
  if (cache.shape(0) != B || start < 0 || start + L > cache.shape(2)) {
    refuse(op, "the cache must have x's batch and room for x's rows at start");
  }
  if (norm_weight.ndim() != 1 || norm_weight.shape(0) != Din) refuse(op, "norm weight: [D]");
  check_linear(op, proj, Din, "proj");
  if (proj.w.shape(0) != H * D) refuse(op, "proj must give the cache's heads times head size");
  if (rope.dims < 0 || rope.dims % 2 || rope.dims > D) refuse(op, "rope dims must be even, <= D");
  if (offset.size() != 1 && offset.size() != size_t(B)) {
    refuse(op, "offset must be one value or one per batch row");
  }
  check_head_norm(op, head_norm, D);
  auto stream = cpu_stream(op, s);
  const int group = proj.group_size, bits = proj.bits, x_bytes = proj.x_bytes;
  const int norm_at = head_norm.weight ? 7 : -1;
  const float head_eps = head_norm.eps;
  auto run = [eps, start, rope, group, bits, x_bytes, B, L, norm_at, head_eps](
                 const std::vector<mx::array>& in, mx::array& out, bool donated) {
    thread_local std::vector<float> gx, gw, xn, y, yn, rows;
    const int Din = in[0].shape(2), H = out.shape(1), D = out.shape(3), M = B * L;
    xn.resize(size_t(M) * Din);
    rms_norm_f32(dense(in[0], gx), dense(in[1], gw), xn.data(), M, Din, eps);
    y.resize(size_t(M) * H * D);
    product(in, 2, group, bits, x_bytes, xn.data(), M, y.data());
    rows.resize(y.size());
    const float* normed = head_normed(in, norm_at, head_eps, y.data(), size_t(M) * H, D, yn);
    heads_first(rope, in[6], normed, B, H, L, D, rows.data());
    if (!donated) copy_dense(in[5], out.data<uint8_t>());
    write_rows(rows.data(), out, L, start);
  };
  std::vector<mx::array> inputs{f32(x, stream), f32(norm_weight, stream)};
  push_linear(inputs, proj);
  inputs.push_back(cache);
  inputs.push_back(mx::astype(offset, mx::int32, stream));
  if (head_norm.weight) inputs.push_back(f32(*head_norm.weight, stream));
  std::vector<float> params{eps, float(start), float(rope.dims), float(rope.traditional),
                            rope.base, rope.scale, float(group), float(bits), float(norm_at),
                            head_eps, float(x_bytes)};
  return mx::array(
      cache.shape(), cache.dtype(),
      std::make_shared<FusedPrimitive>(stream, "CpuProjectKV", std::move(params), run, 5),
      std::move(inputs));
}

namespace {

// The mask's input and kind, read through strides that broadcast it to [B, Hq, L, S] (no
// broadcast node: a size-1 axis gets stride 0 when evaluated).
MaskKind layer_mask(const char* op, const std::variant<std::monostate, std::string, mx::array>& mask,
                    const mx::Shape& target, mx::Stream stream, std::vector<mx::array>& inputs) {
  if (std::holds_alternative<std::string>(mask)) {
    if (std::get<std::string>(mask) != "causal") refuse(op, "a string mask must be \"causal\"");
    if (target[2] > target[3]) refuse(op, "a causal mask needs at least as many keys as queries");
    return MaskKind::Causal;
  }
  if (!std::holds_alternative<mx::array>(mask)) return MaskKind::None;
  const auto& m = std::get<mx::array>(mask);
  if (m.ndim() > 4) refuse(op, "the mask must be broadcastable to [B, Hq, L, S]");
  for (int t = 4 - m.ndim(); t < 4; t++) {
    int size = m.shape(t - (4 - m.ndim()));
    if (size != 1 && size != target[t]) refuse(op, "the mask must be broadcastable to [B, Hq, L, S]");
  }
  MaskKind kind = m.dtype() == mx::bool_ ? MaskKind::Bool : MaskKind::Additive;
  inputs.push_back(kind == MaskKind::Bool ? m : f32(m, stream));
  return kind;
}

void mask_strides(const mx::array& m, int64_t* strides) {
  const int lead = 4 - m.ndim();
  for (int t = 0; t < 4; t++) {
    strides[t] = (t < lead || m.shape(t - lead) == 1) ? 0 : m.strides()[t - lead];
  }
}

// Input positions of decoder_layer's arrays.
// Then the query's head norm and the mask, where the layer has them (q_norm_at, mask_at).
enum : size_t { X, KEYS, VALUES, OFFSET, NORM_ATTN, NORM_MLP, Q, O = Q + 3, GATE = O + 3,
                UP = GATE + 3, DOWN = UP + 3 };

struct LayerRun {
  LayerSpec spec;
  int n_keys;
  MaskKind kind;
  int groups[5], bits[5], x_bytes[5];  // q, o, gate, up, down
  int q_norm_at = -1, mask_at = -1;
  float q_eps = 0.0f;
  bool mlp = true;  // else the output is h, the attention's residual sum

  void operator()(const std::vector<mx::array>& in, mx::array& out, bool) const;
  void attention(const std::vector<mx::array>& in, const float* q, float* att) const;
};

void LayerRun::attention(const std::vector<mx::array>& in, const float* q, float* att) const {
  thread_local std::vector<uint8_t> kb, vb;
  const int B = in[X].shape(0), L = in[X].shape(1), Hq = spec.q_heads, D = in[KEYS].shape(3);
  Attend a{};
  a.batch = B;
  a.q_heads = Hq;
  a.length = L;
  a.scale = spec.scale;
  a.q = q;
  a.q_strides[0] = int64_t(Hq) * L * D;
  a.q_strides[1] = int64_t(L) * D;
  a.q_strides[2] = D;
  a.kv_heads = in[KEYS].shape(1);
  a.keys = n_keys;
  a.k = plain_side(in[KEYS], kb);
  a.v = plain_side(in[VALUES], vb);
  a.mask_kind = kind;
  if (mask_at >= 0) {
    a.mask = in[mask_at].data<void>();
    mask_strides(in[mask_at], a.mask_strides);
  }
  attend(a, att);
}

void LayerRun::operator()(const std::vector<mx::array>& in, mx::array& out, bool) const {
  thread_local std::vector<float> gx, gw1, gw2, xn, qy, qn, qr, att, at, oy, h, g, u, sw, d;
  const int B = in[X].shape(0), L = in[X].shape(1), Dm = in[X].shape(2), M = B * L;
  const int Hq = spec.q_heads, D = in[KEYS].shape(3), Dv = in[VALUES].shape(3);
  const float* x = dense(in[X], gx);
  xn.resize(size_t(M) * Dm);
  rms_norm_f32(x, dense(in[NORM_ATTN], gw1), xn.data(), M, Dm, spec.eps_attn);
  qy.resize(size_t(M) * Hq * D);
  product(in, Q, groups[0], bits[0], x_bytes[0], xn.data(), M, qy.data());
  qr.resize(qy.size());
  const float* normed = head_normed(in, q_norm_at, q_eps, qy.data(), size_t(M) * Hq, D, qn);
  heads_first(spec.rope, in[OFFSET], normed, B, Hq, L, D, qr.data());
  att.resize(size_t(M) * Hq * Dv);
  attention(in, qr.data(), att.data());
  const float* merged = att.data();  // [B, Hq, L, Dv] as [B, L, Hq * Dv]: the same for L = 1
  if (L > 1) {
    at.resize(att.size());
    for (int b = 0; b < B; b++)
      for (int hq = 0; hq < Hq; hq++)
        for (int l = 0; l < L; l++)
          std::memcpy(at.data() + ((size_t(b) * L + l) * Hq + hq) * Dv,
                      att.data() + ((size_t(b) * Hq + hq) * L + l) * Dv, sizeof(float) * Dv);
    merged = at.data();
  }
  oy.resize(size_t(M) * Dm);
  product(in, O, groups[1], bits[1], x_bytes[1], merged, M, oy.data());
  h.resize(oy.size());
  float* sum = mlp ? h.data() : out.data<float>();  // without the MLP, h is the output
  for (size_t i = 0; i < h.size(); i++) sum[i] = x[i] + oy[i];
  if (!mlp) return;
  rms_norm_f32(h.data(), dense(in[NORM_MLP], gw2), xn.data(), M, Dm, spec.eps_mlp);
  const int F = in[GATE].shape(0);
  g.resize(size_t(M) * F);
  u.resize(g.size());
  sw.resize(g.size());
  // Gate and up read the same activations: one split over both (one pool hand-off).
  const Problem gate_up[2] = {problem(in, GATE, groups[2], bits[2], x_bytes[2], xn.data(), M, g.data()),
                              problem(in, UP, groups[3], bits[3], x_bytes[3], xn.data(), M, u.data())};
  if (M > 0 && F > 0) run_products(gate_up, 2, active_kernels());
  swiglu_f32(g.data(), u.data(), sw.data(), sw.size());
  d.resize(size_t(M) * Dm);
  product(in, DOWN, groups[4], bits[4], x_bytes[4], sw.data(), M, d.data());
  float* result = out.data<float>();
  for (size_t i = 0; i < d.size(); i++) result[i] = h[i] + d[i];
}

void check_mlp(const char* op, int Dm, const Linear& gate, const Linear& up, const Linear& down) {
  check_linear(op, gate, Dm, "gate");
  check_linear(op, up, Dm, "up");
  if (gate.w.shape(0) != up.w.shape(0)) refuse(op, "gate and up must give as many features");
  check_linear(op, down, gate.w.shape(0), "down");
  if (down.w.shape(0) != Dm) refuse(op, "down must give D features");
}

void check_layer(const char* op, const mx::array& x, const mx::array& keys,
                 const mx::array& values, int n_keys, const mx::array& norm_attn,
                 const mx::array& norm_mlp, const Linear& q, const Linear& o, int q_heads) {
  if (x.ndim() != 3 || keys.ndim() != 4 || values.ndim() != 4) {
    refuse(op, "x must be [B, L, D], keys and values [B, Hkv, S, D]");
  }
  const int B = x.shape(0), L = x.shape(1), Dm = x.shape(2), Hkv = keys.shape(1);
  for (const auto* kv : {&keys, &values}) {
    if (kv->dtype() != mx::float16 && kv->dtype() != mx::float32) {
      refuse(op, "keys and values must be float16 or float32");
    }
    if (kv->shape(0) != B || kv->shape(1) != Hkv || kv->shape(2) < n_keys) {
      refuse(op, "keys and values must share x's batch, their heads, and hold n_keys");
    }
  }
  if (n_keys < L || Hkv == 0 || q_heads % Hkv) refuse(op, "bad n_keys or head counts");
  for (const auto* n : {&norm_attn, &norm_mlp}) {
    if (n->ndim() != 1 || n->shape(0) != Dm) refuse(op, "norm weights must be [D]");
  }
  check_linear(op, q, Dm, "q");
  if (q.w.shape(0) != q_heads * keys.shape(3)) refuse(op, "q must give q_heads x head size");
  check_linear(op, o, q_heads * values.shape(3), "o");
  if (o.w.shape(0) != Dm) refuse(op, "o must give D features");
}

}  // namespace

mx::array decoder_layer(
    const mx::array& x,
    const mx::array& keys,
    const mx::array& values,
    int n_keys,
    const mx::array& offset,
    const std::variant<std::monostate, std::string, mx::array>& mask,
    const mx::array& norm_attn,
    const mx::array& norm_mlp,
    const Linear& q,
    const Linear& o,
    const std::optional<Linear>& gate,
    const std::optional<Linear>& up,
    const std::optional<Linear>& down,
    const LayerSpec& spec,
    const HeadNorm& q_norm,
    mx::StreamOrDevice s) {
  const char* op = "decoder_layer";
  check_layer(op, x, keys, values, n_keys, norm_attn, norm_mlp, q, o, spec.q_heads);
  const bool mlp = gate.has_value();
  if (up.has_value() != mlp || down.has_value() != mlp) {
    refuse(op, "gate, up and down must be given together (or none: no MLP)");
  }
  if (mlp) check_mlp(op, x.shape(2), *gate, *up, *down);
  const int D = keys.shape(3);
  if (spec.rope.dims < 0 || spec.rope.dims % 2 || spec.rope.dims > D) {
    refuse(op, "rope dims must be even and <= head size");
  }
  if (offset.size() != 1 && offset.size() != size_t(x.shape(0))) {
    refuse(op, "offset must be one value or one per batch row");
  }
  check_head_norm(op, q_norm, D);
  auto stream = cpu_stream(op, s);
  std::vector<mx::array> inputs{f32(x, stream), keys, values, mx::astype(offset, mx::int32, stream),
                                f32(norm_attn, stream), f32(norm_mlp, stream)};
  std::vector<const Linear*> linears{&q, &o};
  if (mlp) linears.insert(linears.end(), {&*gate, &*up, &*down});
  for (const Linear* l : linears) push_linear(inputs, *l);
  mx::Shape target{x.shape(0), spec.q_heads, x.shape(1), n_keys};
  LayerRun run{spec, n_keys, MaskKind::None, {}, {}};
  run.mlp = mlp;
  if (q_norm.weight) {
    run.q_norm_at = int(inputs.size());
    run.q_eps = q_norm.eps;
    inputs.push_back(f32(*q_norm.weight, stream));
  }
  run.kind = layer_mask(op, mask, target, stream, inputs);
  if (run.kind == MaskKind::Bool || run.kind == MaskKind::Additive) run.mask_at = int(inputs.size()) - 1;
  std::vector<float> params{spec.eps_attn, spec.eps_mlp, spec.scale, float(spec.q_heads),
                            float(n_keys), float(run.kind), float(spec.rope.dims),
                            float(spec.rope.traditional), spec.rope.base, spec.rope.scale,
                            float(run.q_norm_at), run.q_eps, float(mlp)};
  for (size_t i = 0; i < linears.size(); i++) {
    run.groups[i] = linears[i]->group_size;
    run.bits[i] = linears[i]->bits;
    run.x_bytes[i] = linears[i]->x_bytes;
    params.insert(params.end(), {float(run.groups[i]), float(run.bits[i]), float(run.x_bytes[i])});
  }
  return mx::array(
      x.shape(), mx::float32,
      std::make_shared<FusedPrimitive>(stream, "CpuDecoderLayer", std::move(params), run),
      std::move(inputs));
}

}  // namespace cpu_kernels
