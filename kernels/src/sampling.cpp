#include "sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "threads.h"
#include "vecmath.h"

namespace cpu_kernels {

namespace {

constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
constexpr float INF = std::numeric_limits<float>::infinity();
// Below this exp() leaves float32's exponent range: the weight is exactly 0, as the engine's
// fast exp has it (and as a token masked with -inf must be).
constexpr float SMALLEST = -87.0f;
// How far below the most likely logit candidates are gathered first, then second: a trained
// model's top_p nucleus is almost always within a few nats. A flatter row's reach comes from
// a histogram (a scalar pass over the row: dearer than a gathering that skips most spans).
constexpr float FIRST_REACHES[] = {4.0f, 8.0f};
// The histogram: tokens counted by how far below the most likely they lie, in bins of BIN
// nats, as far as BINS * BIN; what lies further is reached by taking every finite logit.
constexpr int BINS = 96;
constexpr float BIN = 0.25f;
// top_k_indices' reaches, tried in turn.
constexpr float REACHES[] = {4.0f, 8.0f, 16.0f, INF};
// Values per block of the unfiltered draw's running sum: the block sums vectorize, and only
// the block the draw lands in is walked token by token.
constexpr size_t BLOCK = 512;
// Values per span whose maximum is kept: gathering reads only the spans that reach its
// threshold (a few dozen of a trained model's 49k logits).
constexpr size_t SPAN = 64;

struct Candidate {
  float value;
  int32_t index;
};

// Most likely first; equal values by lower index (the order a stable sort gives). An object
// rather than a function, so that the sorts inline it.
constexpr struct {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.value > b.value || (a.value == b.value && a.index < b.index);
  }
} before;

inline float weight(float x, float top, float inverse_temperature) {
  const float t = (x - top) * inverse_temperature;
  // The loops over this vectorize only without trapping math (CMakeLists.txt): GCC will not
  // compute the exp for lanes a select then drops.
  const float e = exp_nonpositive(t > SMALLEST ? t : SMALLEST);
  return e * float(t >= SMALLEST);  // NaN and -inf weigh nothing
}

// The largest value of each SPAN of x (NaN ignored; -inf for a span without a number).
CPU_KERNELS_CLONES
void span_maxima(const float* x, size_t n, float* out) {
  for (size_t s = 0; s * SPAN < n; s++) {
    const float* v = x + s * SPAN;
    const size_t len = std::min(SPAN, n - s * SPAN);
    float m = NEG_INF;
#pragma omp simd reduction(max : m)
    for (size_t i = 0; i < len; i++) m = v[i] > m ? v[i] : m;
    out[s] = m;
  }
}

// A row's logits, their largest, and each span's largest.
struct Row {
  const float* x;
  size_t n;
  float top;
  const std::vector<float>& spans;
};

Row scan(const float* x, size_t n, std::vector<float>& spans) {
  spans.resize((n + SPAN - 1) / SPAN);
  span_maxima(x, n, spans.data());
  float top = NEG_INF;
  for (float m : spans) top = m > top ? m : top;
  return {x, n, top, spans};
}

CPU_KERNELS_CLONES
float weight_sum(const float* x, size_t n, float top, float inverse_temperature) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (size_t i = 0; i < n; i++) sum += weight(x[i], top, inverse_temperature);
  return sum;
}

// The first index holding the row's largest value (mx.argmax's choice among equals), else 0.
int32_t first_top(const Row& r) {
  for (size_t s = 0; s < r.spans.size(); s++) {
    if (r.spans[s] != r.top) continue;
    for (size_t i = s * SPAN; i < std::min(r.n, (s + 1) * SPAN); i++) {
      if (r.x[i] == r.top) return int32_t(i);
    }
  }
  return 0;
}

// Every token above -inf at or above `threshold`; returns their untempered weight.
double gather(const Row& r, float threshold, std::vector<Candidate>& out) {
  out.clear();
  double mass = 0.0;
  for (size_t s = 0; s < r.spans.size(); s++) {
    if (!(r.spans[s] >= threshold)) continue;
    for (size_t i = s * SPAN; i < std::min(r.n, (s + 1) * SPAN); i++) {
      const float v = r.x[i];
      if (v >= threshold && v > NEG_INF) {
        out.push_back({v, int32_t(i)});
        mass += weight(v, r.top, 1.0f);
      }
    }
  }
  return mass;
}

// How many of the sorted candidates mlx-lm's filters keep, a prefix: top_p keeps a token
// while the probability before it is below top_p, min_p those within log(min_p) of the most
// likely, top_k the first k.
size_t kept_prefix(const std::vector<Candidate>& c, size_t count, const RowParams& p, float top,
                   double total) {
  size_t limit = count;
  if (p.top_k > 0 && p.top_k < float(limit)) limit = size_t(p.top_k);
  const float floor = p.min_p > 0 ? top + std::log(p.min_p) : NEG_INF;
  double before_mass = 0.0;
  for (size_t j = 0; j < limit; j++) {
    if (c[j].value < floor) return j;
    if (p.top_p < 1 && before_mass >= p.top_p) return j;
    before_mass += weight(c[j].value, top, 1.0f) / total;
  }
  return limit;
}

// The tempered draw among the first `kept` candidates, by inverting their running sum.
int32_t draw_kept(const std::vector<Candidate>& c, size_t kept, const RowParams& p, float top) {
  thread_local std::vector<double> running;
  kept = std::max<size_t>(kept, 1);  // the most likely token always passes the filters
  running.resize(kept);
  double sum = 0.0;
  for (size_t j = 0; j < kept; j++) {
    sum += weight(c[j].value, top, p.inverse_temperature);
    running[j] = sum;
  }
  const double target = double(p.uniform) * sum;
  // The first token whose running sum passes the target carries weight; a uniform that
  // float32 rounded up to 1 lands on the last token that does.
  auto it = std::upper_bound(running.begin(), running.end(), target);
  if (it == running.end()) it = std::lower_bound(running.begin(), running.end(), sum);
  return c[size_t(it - running.begin())].index;
}

// The filters' prefix, with the candidates sorted only as far as it needs: the first `want`
// in order, then twice as many, until a filter stops inside the sorted ones (or all are).
size_t sort_and_keep(
    std::vector<Candidate>& c, const RowParams& p, float top, double total, size_t want) {
  size_t sorted = 0;
  for (;; want *= 2) {
    const size_t end = std::min(want, c.size());
    const auto first = c.begin() + ptrdiff_t(sorted), last = c.begin() + ptrdiff_t(end);
    if (end < c.size()) std::nth_element(first, last, c.end(), before);
    std::sort(first, last, before);
    sorted = end;
    const size_t kept = kept_prefix(c, sorted, p, top, total);
    if (kept < sorted || sorted == c.size()) return kept;
  }
}

// How far a flat row must reach for top_p or top_k to stop, from a histogram of its tokens
// by distance below the most likely (each token's probability taken at its bin's middle, and
// one bin more for what that misjudges), and how many tokens lie in the bins before.
struct Reach {
  float nats;
  size_t inside;
};

Reach histogram_reach(const Row& r, const RowParams& p, double total) {
  // Four histograms, by index mod 4, so that neighbours in one bin (the usual case) do not
  // wait on each other's increments.
  uint32_t counts[4][BINS] = {};
  const float lowest = r.top - float(BINS) * BIN;
  for (size_t s = 0; s < r.spans.size(); s++) {
    if (!(r.spans[s] > lowest)) continue;
    for (size_t i = s * SPAN; i < std::min(r.n, (s + 1) * SPAN); i++) {
      const float bins = (r.top - r.x[i]) * (1.0f / BIN);
      if (bins < float(BINS)) counts[i & 3][int(bins)]++;  // NaN and -inf fail the test
    }
  }
  uint32_t count[BINS];
  for (int b = 0; b < BINS; b++) count[b] = counts[0][b] + counts[1][b] + counts[2][b] + counts[3][b];
  double mass = 0.0;
  size_t counted = 0;
  for (int b = 0; b < BINS; b++) {
    const size_t before = counted;
    counted += count[b];
    mass += double(count[b]) * std::exp(-(double(b) + 0.5) * BIN) / total;
    const bool p_stops = p.top_p < 1 && mass >= p.top_p;
    const bool k_stops = p.top_k > 0 && float(counted) >= p.top_k;
    if (p_stops || k_stops) return {float(b + 1 + (p_stops ? 1 : 0)) * BIN + 0.01f, before};
  }
  return {INF, counted};
}

// A row with filters: candidates within a reach of the most likely token, sorted as far as
// the filters need, reaching further until the filters stop inside them (what lies beyond
// ranks lower and would be cut too): 4 nats, 8, then the histogram's reach, then further.
int32_t draw_filtered(const Row& r, const RowParams& p, std::vector<Candidate>& c) {
  const float top = r.top;
  const double total = weight_sum(r.x, r.n, top, 1.0f);
  const float floor = p.min_p > 0 ? top + std::log(p.min_p) : NEG_INF;
  const bool top_k = p.top_k > 0 && p.top_k < float(r.n);
  Reach reach{FIRST_REACHES[0], 0};
  for (int attempt = 0;; attempt++) {
    const float threshold = std::max(top - reach.nats, floor);
    // min_p cuts everything below its floor: gathered down to it, nothing beyond can matter.
    const bool complete = threshold <= floor;
    const double mass = gather(r, threshold, c);
    const bool k_cuts = top_k && float(c.size()) >= p.top_k;
    // Enough probability for top_p to stop inside (or another filter can): sort and filter.
    if (complete || k_cuts || (p.top_p < 1 && mass / total >= p.top_p - 1e-6)) {
      size_t kept;
      if (k_cuts) {
        std::partial_sort(c.begin(), c.begin() + ptrdiff_t(p.top_k), c.end(), before);
        kept = kept_prefix(c, c.size(), p, top, total);
      } else {
        kept = sort_and_keep(c, p, top, total, std::max<size_t>(256, reach.inside * 5 / 4));
      }
      if (complete || k_cuts || kept < c.size()) return draw_kept(c, kept, p, top);
    }
    const float last = reach.nats;
    if (attempt == 0) {
      reach = {FIRST_REACHES[1], c.size()};
    } else if (attempt == 1) {
      reach = histogram_reach(r, p, total);
      reach.nats = std::max(reach.nats, last + BIN);
    } else {
      reach = {last + 4.0f, c.size()};
    }
    if (reach.nats > float(BINS) * BIN) reach.nats = INF;
  }
}

// A row without filters draws from the whole vocabulary in index order (the same
// distribution as sorted): block sums first, then the one block the draw lands in.
int32_t draw_plain(const Row& r, const RowParams& p) {
  const float* x = r.x;
  const size_t n = r.n;
  const float top = r.top;
  thread_local std::vector<float> sums;
  const size_t blocks = (n + BLOCK - 1) / BLOCK;
  sums.resize(blocks);
  double total = 0.0;
  for (size_t b = 0; b < blocks; b++) {
    sums[b] = weight_sum(x + b * BLOCK, std::min(BLOCK, n - b * BLOCK), top, p.inverse_temperature);
    total += sums[b];
  }
  const double target = double(p.uniform) * total;
  double running = 0.0;
  size_t b = 0;
  for (; b < blocks && running + sums[b] <= target; b++) running += sums[b];
  // Past the end: a uniform that float32 rounded up to 1; the last token with weight.
  const bool past = b == blocks;
  if (past) {
    for (b = blocks; b > 0 && sums[b - 1] == 0.0f; b--) {}
    b = b > 0 ? b - 1 : 0;
  }
  int32_t last = first_top(r);
  for (size_t i = b * BLOCK; i < std::min(n, (b + 1) * BLOCK); i++) {
    const float w = weight(x[i], top, p.inverse_temperature);
    if (w == 0.0f) continue;
    last = int32_t(i);
    running += w;
    if (!past && running > target) return last;
  }
  return last;  // rounding between the block's sum and its walk
}

int32_t sample_row(const float* x, size_t n, const float* raw, std::vector<Candidate>& c) {
  thread_local std::vector<float> spans;
  const RowParams p{raw[0], raw[1], raw[2], raw[3], raw[4]};
  const Row r = scan(x, n, spans);
  if (!(p.inverse_temperature > 0) || !std::isfinite(r.top)) return first_top(r);
  const bool filtered = p.top_p < 1 || p.min_p > 0 || (p.top_k > 0 && p.top_k < float(n));
  return filtered ? draw_filtered(r, p, c) : draw_plain(r, p);
}

void top_k_row(const float* x, size_t n, size_t k, int32_t* out, std::vector<Candidate>& c) {
  thread_local std::vector<float> spans;
  const Row r = scan(x, n, spans);
  for (float reach : REACHES) {
    gather(r, reach == INF ? NEG_INF : r.top - reach, c);
    if (c.size() >= k || reach == INF) break;
  }
  const size_t take = std::min(k, c.size());
  std::partial_sort(c.begin(), c.begin() + ptrdiff_t(take), c.end(), before);
  size_t j = 0;
  for (; j < take; j++) out[j] = c[j].index;
  // Fewer than k finite values: the -inf tokens follow, then NaN, each in index order.
  for (size_t i = 0; i < n && j < k; i++) {
    if (x[i] == NEG_INF) out[j++] = int32_t(i);
  }
  for (size_t i = 0; i < n && j < k; i++) {
    if (std::isnan(x[i])) out[j++] = int32_t(i);
  }
}

}  // namespace

void sample_rows_f32(
    const float* logits, const float* params, int32_t* out, size_t rows, size_t vocab) {
  split(rows, vocab * 4, 1, [&](size_t r0, size_t r1) {
    thread_local std::vector<Candidate> candidates;
    for (size_t r = r0; r < r1; r++) {
      out[r] = sample_row(logits + r * vocab, vocab, params + r * ROW_PARAMS, candidates);
    }
  });
}

void top_k_indices_f32(const float* logits, int32_t* out, size_t rows, size_t vocab, size_t k) {
  split(rows, vocab * 2, 1, [&](size_t r0, size_t r1) {
    thread_local std::vector<Candidate> candidates;
    for (size_t r = r0; r < r1; r++) top_k_row(logits + r * vocab, vocab, k, out + r * k, candidates);
  });
}

}  // namespace cpu_kernels
