// What the primitives' files share (primitives.cpp defines them): argument checks, the CPU
// stream, and reading evaluated arrays as the kernels take them.
#pragma once

#include <string>
#include <vector>

#include "attention.h"
#include "mlx/array.h"
#include "mlx/stream.h"
#include "mlx/utils.h"
#include "qmm.h"

namespace cpu_kernels {

namespace mx = mlx::core;

// Throws invalid_argument as "[cpu_kernels.<op>] <what>" (ValueError in Python).
[[noreturn]] void refuse(const char* op, const std::string& what);

// MLX's CPU stream for `s`; refuses any other device.
mx::Stream cpu_stream(const char* op, mx::StreamOrDevice s);

// The float32 array as dense row-major floats: itself when row-contiguous, else gathered.
const float* dense(const mx::array& x, std::vector<float>& buffer);

// Refuses an x_bytes (Problem::x_bytes) other than 1 or 2.
void check_x_bytes(const char* op, int x_bytes);

// The kernels' name for a scales/biases dtype (refuses anything but float32/16, bfloat16).
ScaleType scale_type(mx::Dtype dtype);

// Why these arrays are not Q6_K's weights for K in_features (k6.h), "" when they are.
std::string k6_refusal(const mx::array& w, const mx::array& scales, const mx::array& biases, int K);
// The type the kernels read a product's scale parameters in: Q6_K's (bits 6) super-block
// scales are float16; otherwise the scales' dtype.
ScaleType params_type(const mx::array& scales, int bits);

// Weights in the x8 layout (qmm.h's Problem::x8) come as uint8 [N, K * bits / 8], MLX's as
// uint32 [.., N, K * bits / 32].
bool is_x8(const mx::array& w);
// The in_features a weight array holds, by its layout.
int in_features(const mx::array& w, int bits);
// Why w cannot be x8 weights of `bits` (N a multiple of 8, 4 or 8 bits, one matrix, this CPU's
// kernels), "" when it can or is not x8.
std::string x8_refusal(const mx::array& w, int bits);

// A float32 or float16 K/V array [B, H, S, D] as the attention kernels read it.
KVSide plain_side(const mx::array& x, std::vector<uint8_t>& buffer);

}  // namespace cpu_kernels
