#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/variant.h>

#include "int8.h"
#include "panels.h"
#include "layer.h"
#include "primitives.h"
#include "qmm.h"
#include "threads.h"

namespace nb = nanobind;
using namespace nb::literals;
namespace ck = cpu_kernels;

namespace {

// A linear layer as Python passes it: (w, scales, biases, group_size, bits).
using PyLinear = std::tuple<ck::mx::array, ck::mx::array, ck::mx::array, int, int>;

// x_bytes: how the direct integer path rounds the layer's activations (qmm.h Problem).
ck::Linear linear(const PyLinear& l, int x_bytes) {
  return ck::Linear{std::get<0>(l), std::get<1>(l), std::get<2>(l), std::get<3>(l), std::get<4>(l), x_bytes};
}

std::optional<ck::Linear> maybe_linear(const std::optional<PyLinear>& l, int x_bytes) {
  if (!l) return std::nullopt;
  return linear(*l, x_bytes);
}

ck::RopeSpec rope_spec(int dims, bool traditional, float base, float scale) {
  return ck::RopeSpec{dims, traditional, base, scale};
}

using PyMask = std::optional<std::variant<std::string, ck::mx::array>>;

std::variant<std::monostate, std::string, ck::mx::array> mask_of(const PyMask& mask) {
  std::variant<std::monostate, std::string, ck::mx::array> m;
  if (mask && std::holds_alternative<std::string>(*mask)) m = std::get<std::string>(*mask);
  if (mask && std::holds_alternative<ck::mx::array>(*mask)) m = std::get<ck::mx::array>(*mask);
  return m;
}

void bind_layer(nb::module_& m) {
  m.def(
      "project_kv",
      [](const ck::mx::array& x, const ck::mx::array& norm_weight, float eps, const PyLinear& proj,
         const ck::mx::array& cache, int start, const ck::mx::array& offset, int rope_dims,
         bool traditional, float base, float rope_scale,
         std::optional<ck::mx::array> head_norm, float head_eps, int x_bytes,
         ck::mx::StreamOrDevice s) {
        return ck::project_kv(x, norm_weight, eps, linear(proj, x_bytes), cache, start, offset,
                              rope_spec(rope_dims, traditional, base, rope_scale),
                              ck::HeadNorm{head_norm, head_eps}, s);
      },
      "x"_a, "norm_weight"_a, "eps"_a, "proj"_a, "cache"_a, "start"_a, "offset"_a, nb::kw_only(),
      "rope_dims"_a = 0, "traditional"_a = false, "base"_a = 10000.0f, "rope_scale"_a = 1.0f,
      "head_norm"_a = nb::none(), "head_eps"_a = 1e-6f, "x_bytes"_a = 2, "stream"_a = nb::none(),
      "rope(head_norm(rms_norm(x) @ dequantize(proj).T)) per head written at rows "
      "[start, start + L) of a KV cache buffer [B, H, S, D]; returns the buffer (donated when "
      "nothing else holds it). head_norm: Qwen3's k_norm weight [D], or None.");

  m.def(
      "decoder_layer",
      [](const ck::mx::array& x, const ck::mx::array& keys, const ck::mx::array& values,
         int n_keys, const ck::mx::array& offset, PyMask mask, const ck::mx::array& norm_attn,
         const ck::mx::array& norm_mlp, const PyLinear& q, const PyLinear& o,
         const std::optional<PyLinear>& gate, const std::optional<PyLinear>& up,
         const std::optional<PyLinear>& down, int q_heads, float eps_attn, float eps_mlp,
         float scale, int rope_dims, bool traditional, float base, float rope_scale,
         std::optional<ck::mx::array> q_norm, float q_eps, int x_bytes, ck::mx::StreamOrDevice s) {
        ck::LayerSpec spec{eps_attn, eps_mlp, scale, q_heads,
                           rope_spec(rope_dims, traditional, base, rope_scale)};
        return ck::decoder_layer(x, keys, values, n_keys, offset, mask_of(mask), norm_attn,
                                 norm_mlp, linear(q, x_bytes), linear(o, x_bytes),
                                 maybe_linear(gate, x_bytes), maybe_linear(up, x_bytes),
                                 maybe_linear(down, x_bytes), spec,
                                 ck::HeadNorm{q_norm, q_eps}, s);
      },
      "x"_a, "keys"_a, "values"_a, "n_keys"_a, "offset"_a, "mask"_a.none(), "norm_attn"_a,
      "norm_mlp"_a, "q"_a, "o"_a, "gate"_a.none(), "up"_a.none(), "down"_a.none(), nb::kw_only(),
      "q_heads"_a,
      "eps_attn"_a, "eps_mlp"_a, "scale"_a, "rope_dims"_a = 0, "traditional"_a = false,
      "base"_a = 10000.0f, "rope_scale"_a = 1.0f, "q_norm"_a = nb::none(), "q_eps"_a = 1e-6f,
      "x_bytes"_a = 2, "stream"_a = nb::none(),
      "The rest of a llama (or Qwen3: q_norm, its query head norm) decoder layer after "
      "project_kv: query, attention over keys/values[:, :, :n_keys], output projection, "
      "SwiGLU MLP, both residuals; gate, up and down None: the attention's residual sum only "
      "(norm_mlp unused).");
}

}  // namespace

NB_MODULE(_ext, m) {
  m.doc() = "Fused and quantized kernels for MLX's CPU backend (x86 AVX-512 / AVX2)";

  m.def("quantized_matmul", &ck::quantized_matmul, "x"_a, "w"_a, "scales"_a, "biases"_a,
        "group_size"_a, "bits"_a, nb::kw_only(), "x_bytes"_a = 2, "stream"_a = nb::none(),
        "x @ dequantize(w, scales, biases).T in float32, as mx.quantized_matmul(transpose=True). "
        "x_bytes: the bytes the direct integer path (few rows) rounds each activation to, 2 "
        "(15 bits) or 1 (8 bits, as llama.cpp's Q8 activations).");

  m.def("gather_quantized_matmul", &ck::gather_quantized_matmul, "x"_a, "experts"_a, "w"_a,
        "scales"_a, "biases"_a, "group_size"_a, "bits"_a, nb::kw_only(), "x_bytes"_a = 2,
        "stream"_a = nb::none(),
        "Each row of x [rows, K] times its expert's weights of w [E, N, K * bits / 32], as "
        "mx.gather_qmm(transpose=True) over rows, in float32; x_bytes as quantized_matmul's.");

  m.def("interleave8", &ck::interleave8, "a"_a, "unit"_a, nb::kw_only(), "stream"_a = nb::none(),
        "a [..., N, B] with each block of eight rows interleaved in units of `unit` bytes (the "
        "x8 layout's weights: unit 16; its scales and biases: their item size).");
  m.def("k6_interleave8", &ck::k6_interleave8, "w"_a, nb::kw_only(), "stream"_a = nb::none(),
        "Q6_K's weights (the kernels' layout, [N, K * 6 / 32] uint32) in the x8 layout: uint8 "
        "[N, K * 6 / 8], eight columns' 16-byte pieces side by side per 64 values.");
  m.def("k6_x8_rows", &ck::k6_x8_rows, "w"_a, "scales"_a, "supers"_a, "ids"_a, nb::kw_only(),
        "stream"_a = nb::none(),
        "Rows `ids` of Q6_K weights in the x8 layout (k6_interleave8's, with its scales and "
        "super-block scales interleaved) as float32 [*ids.shape, K]: an embedding's lookup in "
        "one primitive.");
  m.def("rms_norm", &ck::rms_norm, "x"_a, "weight"_a, "eps"_a, nb::kw_only(),
        "stream"_a = nb::none(), "mx.fast.rms_norm in float32, one pass per row.");

  m.def("depthwise_conv1d", &ck::depthwise_conv1d, "x"_a, "w"_a, "padding"_a = 0, nb::kw_only(),
        "stream"_a = nb::none(),
        "mx.conv1d(x, w, padding=padding, groups=C) for x [B, L, C] and w [C, K, 1], in float32.");

  m.def("gated_delta", &ck::gated_delta, "q"_a, "k"_a, "v"_a, "g"_a, "beta"_a, "state"_a,
        "mask"_a = nb::none(), nb::kw_only(), "stream"_a = nb::none(),
        "The gated delta rule over T steps (mlx-lm's gated_delta_ops with one gate per value "
        "head): one flat float32 array, the new state [B, Hv, Dv, Dk] then y [B, T, Hv, Dv].");

  m.def("swiglu", &ck::swiglu, "gate"_a, "up"_a, nb::kw_only(), "stream"_a = nb::none(),
        "silu(gate) * up in float32.");

  m.def("rope", &ck::rope, "x"_a, "dims"_a, nb::kw_only(), "traditional"_a, "base"_a.none(),
        "scale"_a, "offset"_a, "freqs"_a = nb::none(), "stream"_a = nb::none(),
        "mx.fast.rope in float32 (forward); offset an int32 array, one value or one per row.");

  m.def(
      "attention",
      [](const ck::mx::array& q, const ck::mx::array& k, const ck::mx::array& v, float scale,
         std::optional<std::variant<std::string, ck::mx::array>> mask, ck::mx::StreamOrDevice s) {
        std::variant<std::monostate, std::string, ck::mx::array> m;
        if (mask && std::holds_alternative<std::string>(*mask)) m = std::get<std::string>(*mask);
        if (mask && std::holds_alternative<ck::mx::array>(*mask)) m = std::get<ck::mx::array>(*mask);
        return ck::attention(q, k, v, scale, m, s);
      },
      "q"_a, "k"_a, "v"_a, nb::kw_only(), "scale"_a, "mask"_a = nb::none(),
      "stream"_a = nb::none(),
      "mx.fast.scaled_dot_product_attention in float32 (K/V float32 or float16), without sinks.");

  m.def(
      "quantized_attention",
      [](const ck::mx::array& q, const ck::mx::array& k, const ck::mx::array& k_scales,
         const ck::mx::array& k_biases, const ck::mx::array& v, const ck::mx::array& v_scales,
         const ck::mx::array& v_biases, float scale,
         std::optional<std::variant<std::string, ck::mx::array>> mask, int group_size, int bits,
         ck::mx::StreamOrDevice s) {
        std::variant<std::monostate, std::string, ck::mx::array> m;
        if (mask && std::holds_alternative<std::string>(*mask)) m = std::get<std::string>(*mask);
        if (mask && std::holds_alternative<ck::mx::array>(*mask)) m = std::get<ck::mx::array>(*mask);
        return ck::quantized_attention(
            q, k, k_scales, k_biases, v, v_scales, v_biases, scale, m, group_size, bits, s);
      },
      "q"_a, "k"_a, "k_scales"_a, "k_biases"_a, "v"_a, "v_scales"_a, "v_biases"_a, nb::kw_only(),
      "scale"_a, "mask"_a = nb::none(), "group_size"_a = 64, "bits"_a = 8, "stream"_a = nb::none(),
      "attention over K/V quantized as mlx-lm's QuantizedKVCache keeps them, in float32.");

  m.def("sample_rows", &ck::sample_rows, "logits"_a, "params"_a, nb::kw_only(),
        "stream"_a = nb::none(),
        "Each row's next token (int32): params [rows, 5] = inverse temperature (0: greedy), "
        "top_p, min_p, top_k, uniform; mlx-lm's filters without sorting the vocabulary.");

  m.def("top_k_indices", &ck::top_k_indices, "logits"_a, "k"_a, nb::kw_only(),
        "stream"_a = nb::none(),
        "Indices of each row's k largest logits (int32), largest first, ties by lower index.");
  bind_layer(m);

  m.def("isa", [] { return std::string(ck::active_kernels().isa); },
        "The instruction set of the quantized matmul here: avx512, avx2 or generic.");

  m.def("use_isa", [](const std::string& isa) { return ck::force_isa(isa.c_str()); }, "isa"_a,
        "Makes later products use one instruction set (tests); False if this CPU lacks it.");

  m.def(
      "use_int8",
      [](const std::string& mode) {
        if (mode == "auto") return ck::set_int8_mode(ck::Int8Mode::Auto);
        if (mode == "always") return ck::set_int8_mode(ck::Int8Mode::Always);
        if (mode == "direct") return ck::set_int8_mode(ck::Int8Mode::Direct);
        if (mode == "panels") return ck::set_int8_mode(ck::Int8Mode::Panels);
        if (mode == "never") return ck::set_int8_mode(ck::Int8Mode::Never);
        throw nb::value_error("mode must be auto, always, direct, panels or never");
      },
      "mode"_a,
      "Paths of the matmul: auto (direct for few rows, panels or tiles from their threshold), "
      "always (integer tiles), direct (weights read as packed), panels (dequantized float "
      "panels) or never (the float rows path): tests, benchmarks.");

  m.def("use_int8_rows", [](int rows) { ck::set_int8_rows(rows < 0 ? 0 : rows); }, "rows"_a,
        "auto chooses a product's path as for this many rows (0: its own): speculative "
        "verification computes its rows as their plain step does.");

  m.def(
      "int8_isa",
      [] {
        const ck::Int8Kernels* k = ck::int8_kernels_for(ck::active_kernels());
        return std::string(k ? k->isa : "none");
      },
      "The integer path's instruction set under the active one: avx512vnni, avx2 or none.");

  m.def(
      "direct_isa",
      [] {
        const ck::DirectInt8* k = ck::direct_kernels_for(ck::active_kernels());
        return std::string(k ? k->isa : "none");
      },
      "The direct integer path's (few rows) instruction set under the active one: "
      "avx512vnni, avx2 or none.");

  m.def(
      "x8_isa",
      [] {
        const ck::DirectInt8* k = ck::x8_direct_for(ck::active_kernels());
        return std::string(k ? k->isa : "none");
      },
      "The direct path over the x8 layout (uint8 weights, eight columns interleaved) under the "
      "active instruction set: avx512vnni-x8, or none where products cannot take that layout.");
  m.def(
      "x8_direct_rows", [](int x_bytes) { return x_bytes == 1 ? ck::X8_DIRECT_ROWS_ONE_BYTE : ck::X8_DIRECT_ROWS; },
      "x_bytes"_a = 2, "The rows up to which auto takes the direct path over the x8 layout (then the tiles).");

  m.def(
      "panels_isa",
      [] {
        const ck::Panels* k = ck::panels_for(ck::active_kernels());
        return std::string(k ? k->isa : "none");
      },
      "The float panels path's (many rows, where the integer tiles are slow) instruction set "
      "under the active one: avx2 or none.");

  m.def("set_threads", [](int threads) { ck::Pool::configure(threads); }, "threads"_a,
        "Threads per operation, the caller included (0: one per core).");

  m.def("threads", [] { return ck::Pool::shared()->threads(); },
        "Threads per operation, the caller included.");

  m.attr("MLX_VERSION") = MLX_BUILT_AGAINST;
}
