// The direct integer paths' loops over rows, row blocks and weight formats, shared by
// int8_direct.cpp (AVX-512 VNNI) and int8_direct_avx2.cpp. Each of those defines, in its own
// anonymous namespace, its `Layout`, `stage_row<BITS>(x, group, L, row)` (one row's
// activations rounded and laid out) and `rows_block<BITS, GROUP, R>(p, L, xs, m0, n0, n1,
// ahead_to)` (R staged rows over columns [n0, n1), prefetching no further than ahead_to where
// the file bounds its prefetches), then includes this file there: the loops compile with that file's instruction set and call
// its kernels.

// Bytes between two staged rows (a product's staged rows take M of them).
size_t row_bytes(const Problem& p) {
  return Layout(p).stride;
}

// x's rows rounded and laid out for columns(), at `out` (row_bytes(p) * M bytes).
void stage(const Problem& p, uint8_t* out) {
  const Layout L(p);
  for (int m = 0; m < p.M; m++) {
    const float* x = p.x + size_t(m) * p.K;
    uint8_t* row = out + L.stride * m;
    if (p.bits == 4) {
      stage_row<4>(x, p.group, L, row);
    } else {
      stage_row<8>(x, p.group, L, row);
    }
  }
}

constexpr int MAX_R = 4;  // rows a block takes at once
// Columns a run holds: every block of rows goes over a run before the next run, so that its
// weights (16 KiB at 2,048 4-bit features) come from memory for the first block of rows and
// from cache for the others.
constexpr int SPAN = 16;

template <int BITS, int GROUP>
void columns_for(const Problem& p, const uint8_t* xs, int n0, int n1) {
  const Layout L(p);
  for (int a = n0; a < n1; a += SPAN) {
    const int b = std::min(n1, a + SPAN);  // prefetches look as far as n1
    int m = 0;
    for (; m + MAX_R <= p.M; m += MAX_R) rows_block<BITS, GROUP, MAX_R>(p, L, xs, m, a, b, n1);
    switch (p.M - m) {
      case 1:
        rows_block<BITS, GROUP, 1>(p, L, xs, m, a, b, n1);
        break;
      case 2:
        rows_block<BITS, GROUP, 2>(p, L, xs, m, a, b, n1);
        break;
      case 3:
        rows_block<BITS, GROUP, 3>(p, L, xs, m, a, b, n1);
        break;
    }
  }
}

// Output columns [n0, n1) of every row, from what the file's stage() left.
void columns(const Problem& p, const uint8_t* xs, int n0, int n1) {
  if (p.bits == 4 && p.group == 32) return columns_for<4, 32>(p, xs, n0, n1);
  if (p.bits == 4 && p.group == 64) return columns_for<4, 64>(p, xs, n0, n1);
  if (p.bits == 4 && p.group == 128) return columns_for<4, 128>(p, xs, n0, n1);
  if (p.bits == 8 && p.group == 32) return columns_for<8, 32>(p, xs, n0, n1);
  if (p.bits == 8 && p.group == 64) return columns_for<8, 64>(p, xs, n0, n1);
  if (p.bits == 8 && p.group == 128) return columns_for<8, 128>(p, xs, n0, n1);
}
