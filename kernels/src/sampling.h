// Sampling a decode batch's next tokens from its logits, one row per sequence, without sorting
// the vocabulary: mlx-lm's filters (top_p, then min_p, then top_k, each keeping a prefix of the
// tokens sorted most likely first, judged on the untempered probabilities) and a draw from
// what they keep, tempered, by inverting the running sum with one uniform per row.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cpu_kernels {

// A row of sample_rows' params array, in this order.
struct RowParams {
  float inverse_temperature;  // 0: greedy, the first of the largest logits (mx.argmax)
  float top_p;                // >= 1: off
  float min_p;                // <= 0: off
  float top_k;                // <= 0 or >= the vocabulary: off
  float uniform;              // the row's draw, in [0, 1)
};
constexpr int ROW_PARAMS = 5;

// out[r] = the token row r draws; logits [rows, vocab], params [rows, ROW_PARAMS], dense.
void sample_rows_f32(
    const float* logits, const float* params, int32_t* out, size_t rows, size_t vocab);

// out[r] = the indices of row r's k largest logits, largest first, equal values by lower index
// (a stable descending sort's first k); -inf and NaN last, in index order.
void top_k_indices_f32(const float* logits, int32_t* out, size_t rows, size_t vocab, size_t k);

}  // namespace cpu_kernels
