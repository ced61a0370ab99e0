/* libblockps (C API) against the shards inside the VM: push/pull of the whole model over every shard through
 * the transport the cluster file names (posix /dev devices with an engine, or libiscsi iscsi:// / iser://).
 *
 *   client_check CLUSTER.toml LR MOMENTUM
 *
 * The velocity left by earlier pushes is unknown, so: pull w0, push g1, pull w1 (every element must move;
 * v1 = (w0 - w1) / lr), push g2, pull w2; w2 must equal w1 - lr * (mu * v1 + g2) within float rounding. Then
 * write_weights/read_weights must round-trip bit for bit, and pull must return what was written.
 * Exit 0 when all holds; 1 with the reason. Built by tests/vm/run.sh against the build's libblockps. */
#define _POSIX_C_SOURCE 200809L
#include <blockps/blockps.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fail(const char* what) {
  fprintf(stderr, "client_check: FAIL: %s: %s\n", what, blockps_last_error());
  return 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: client_check CLUSTER.toml LR MOMENTUM\n");
    return 2;
  }
  const float lr = strtof(argv[2], NULL);
  const float mu = strtof(argv[3], NULL);
  blockps_cluster* c = NULL;
  if (blockps_cluster_open(argv[1], &c) != BLOCKPS_OK) return fail("open");
  if (strcmp(blockps_cluster_dtype(c), "f32") != 0) {
    fprintf(stderr, "client_check: FAIL: the model's dtype is %s, this check needs f32\n", blockps_cluster_dtype(c));
    return 1;
  }
  const size_t bytes = blockps_cluster_model_bytes(c);
  const size_t n = bytes / sizeof(float);
  float* w0 = malloc(bytes);
  float* w1 = malloc(bytes);
  float* w2 = malloc(bytes);
  float* g = malloc(bytes);
  if (!w0 || !w1 || !w2 || !g) return fail("malloc");
  unsigned seed = 12345;
  const double t0 = now_s();
  if (blockps_pull(c, w0, bytes) != BLOCKPS_OK) return fail("pull w0");
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    g[i] = (0.5f + (float)(seed >> 16 & 0x7fff) / 65536.0f) * 1e-2f * ((seed >> 31) ? -1.0f : 1.0f);
  }
  if (blockps_push(c, g, bytes) != BLOCKPS_OK) return fail("push g1");
  if (blockps_pull(c, w1, bytes) != BLOCKPS_OK) return fail("pull w1");
  size_t moved = 0;
  for (size_t i = 0; i < n; i++) moved += w1[i] != w0[i];
  if (moved != n) {
    fprintf(stderr, "client_check: FAIL: push g1 moved only %zu of %zu weights\n", moved, n);
    return 1;
  }
  for (size_t i = 0; i < n; i++) g[i] = 0.75e-2f - g[i] * 0.25f;
  if (blockps_push(c, g, bytes) != BLOCKPS_OK) return fail("push g2");
  if (blockps_pull(c, w2, bytes) != BLOCKPS_OK) return fail("pull w2");
  const double t_pushpull = now_s() - t0;
  size_t bad = 0, worst = 0;
  double worst_err = 0;
  for (size_t i = 0; i < n; i++) {
    const double v1 = ((double)w0[i] - (double)w1[i]) / lr;
    const double want = (double)w1[i] - (double)lr * ((double)mu * v1 + (double)g[i]);
    const double err = fabs((double)w2[i] - want);
    if (err > 1e-6) bad++;
    if (err > worst_err) {
      worst_err = err;
      worst = i;
    }
  }
  if (bad) {
    fprintf(stderr, "client_check: FAIL: %zu of %zu weights off the momentum update (worst element %zu: error %.3g)\n",
            bad, n, worst, worst_err);
    return 1;
  }
  for (size_t i = 0; i < n; i++) w0[i] = (float)((double)(i % 1000) * 1e-5 - 5e-3);
  if (blockps_write_weights(c, w0, bytes) != BLOCKPS_OK) return fail("write_weights");
  if (blockps_read_weights(c, w1, bytes) != BLOCKPS_OK) return fail("read_weights");
  if (memcmp(w0, w1, bytes) != 0) {
    fprintf(stderr, "client_check: FAIL: read_weights differs from what write_weights wrote\n");
    return 1;
  }
  if (blockps_pull(c, w2, bytes) != BLOCKPS_OK) return fail("pull after write_weights");
  if (memcmp(w0, w2, bytes) != 0) {
    fprintf(stderr, "client_check: FAIL: pull differs from what write_weights wrote\n");
    return 1;
  }
  printf("client_check: ok: %zu shards, %zu elements: 2 pushes + 3 pulls in %.2fs (max error %.2g), "
         "weights round trip exact\n",
         blockps_cluster_shard_count(c), n, t_pushpull, worst_err);
  blockps_cluster_close(c);
  free(w0);
  free(w1);
  free(w2);
  free(g);
  return 0;
}
