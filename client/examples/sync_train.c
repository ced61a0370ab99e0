/* blockps-sync-train: one worker of a synchronous (mode=sync) training run through the C API, checking every
 * round against what BSP must give.
 *
 *   blockps-sync-train CLUSTER.toml --rank R --workers W --rounds N --lr LR [--digests FILE]
 *
 * The "model" is a quadratic: worker r minimises 0.5 * |w - t_r|^2 for its own target t_r (uniform in [-1, 1],
 * seeded by r), so its gradient is w - t_r. The shards must run opt=sgd with learning rate LR and
 * mode=sync;workers=W: per round they average the W gradients and apply w -= LR * mean. Each worker knows every
 * target, so after it pushes w - t_r and pulls, it checks the weights element by element against
 *     w' = w - LR * (w - mean_r t_r)          (the average of all W gradients, applied once)
 * within float rounding. That fails when a round closes without every worker (straggler or a worker counted
 * twice: one gradient, or twice one worker's), when pushes are applied one by one (async: two steps), or when
 * a pull returns a half-applied round. It also needs the distance |w - mean t| to fall by (1 - LR)^N, and it
 * writes one line per round ("ROUND FNV1A64-OF-THE-WEIGHT-BYTES") to --digests, so that a caller can check that
 * all workers read bit-identical weights every round. Each worker must be its own iSCSI session (I_T nexus).
 * Exit 0 when every round held; 1 when a check failed; 2 on errors (bad arguments, I/O: the message names it). */
#define _POSIX_C_SOURCE 200809L
#include <blockps/blockps.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t fnv1a64(const void* p, size_t n) {
  const unsigned char* b = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* Worker r's target, element i: a fixed pseudo-random value in [-1, 1] that every worker can compute. */
static float target(int rank, size_t i) {
  uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)(rank + 1) * 0xD1B54A32D192ED03ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return (float)((double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static double rms_distance(const float* w, const float* mean_t, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += ((double)w[i] - mean_t[i]) * ((double)w[i] - mean_t[i]);
  return sqrt(s / (double)n);
}

static int usage(void) {
  fprintf(stderr,
          "usage: blockps-sync-train CLUSTER.toml --rank R --workers W --rounds N --lr LR [--digests FILE]\n");
  return 2;
}

int main(int argc, char** argv) {
  const char* cluster_file = NULL;
  const char* digests_path = NULL;
  int rank = -1, workers = 0, rounds = 0;
  double lr = -1;
  for (int a = 1; a < argc; a++) {
    const int more = a + 1 < argc;
    if (strcmp(argv[a], "--rank") == 0 && more) rank = atoi(argv[++a]);
    else if (strcmp(argv[a], "--workers") == 0 && more) workers = atoi(argv[++a]);
    else if (strcmp(argv[a], "--rounds") == 0 && more) rounds = atoi(argv[++a]);
    else if (strcmp(argv[a], "--lr") == 0 && more) lr = strtod(argv[++a], NULL);
    else if (strcmp(argv[a], "--digests") == 0 && more) digests_path = argv[++a];
    else if (argv[a][0] != '-' && cluster_file == NULL) cluster_file = argv[a];
    else return usage();
  }
  if (cluster_file == NULL || workers < 1 || rank < 0 || rank >= workers || rounds < 1 || !(lr > 0 && lr < 1)) {
    fprintf(stderr, "sync-train: need a cluster file, --workers >= 1, --rank in 0..W-1, --rounds >= 1, --lr in (0, 1)\n");
    return usage();
  }
  blockps_cluster* c = NULL;
  if (blockps_cluster_open(cluster_file, &c) != BLOCKPS_OK) {
    fprintf(stderr, "sync-train[%d]: %s\n", rank, blockps_last_error());
    return 2;
  }
  if (strcmp(blockps_cluster_dtype(c), "f32") != 0) {
    fprintf(stderr, "sync-train[%d]: the model's dtype is %s; this example needs f32\n", rank, blockps_cluster_dtype(c));
    return 2;
  }
  const size_t bytes = blockps_cluster_model_bytes(c), n = bytes / sizeof(float);
  float* w = malloc(bytes);
  float* g = malloc(bytes);
  float* mine = malloc(bytes);
  float* mean_t = malloc(bytes);
  FILE* digests = digests_path ? fopen(digests_path, "w") : NULL;
  if (!w || !g || !mine || !mean_t || (digests_path && !digests)) {
    fprintf(stderr, "sync-train[%d]: out of memory or cannot write %s\n", rank, digests_path ? digests_path : "-");
    return 2;
  }
  for (size_t i = 0; i < n; i++) {
    double sum = 0;
    for (int r = 0; r < workers; r++) sum += target(r, i);
    mean_t[i] = (float)(sum / workers);
    mine[i] = target(rank, i);
  }
  printf("sync-train[%d]: %zu f32 over %zu shards, %d workers, %d rounds, lr %g\n", rank, n,
         blockps_cluster_shard_count(c), workers, rounds, lr);
  if (blockps_pull(c, w, bytes) != BLOCKPS_OK) {
    fprintf(stderr, "sync-train[%d]: first pull: %s\n", rank, blockps_last_error());
    return 2;
  }
  const double d0 = rms_distance(w, mean_t, n);
  if (digests) fprintf(digests, "0 %016llx\n", (unsigned long long)fnv1a64(w, bytes));
  printf("round   0  |w - mean t| %.6g\n", d0);
  int failed = 0;
  for (int k = 1; k <= rounds && !failed; k++) {
    const double t0 = now_s();
    for (size_t i = 0; i < n; i++) g[i] = w[i] - mine[i];
    if (blockps_push(c, g, bytes) != BLOCKPS_OK) {
      fprintf(stderr, "sync-train[%d]: round %d push: %s\n", rank, k, blockps_last_error());
      return 2;
    }
    const double t_push = now_s();
    /* The pushed gradient is no longer needed (the push completed): g now holds the expected weights. */
    for (size_t i = 0; i < n; i++) g[i] = (float)((double)w[i] - lr * ((double)w[i] - (double)mean_t[i]));
    if (blockps_pull(c, w, bytes) != BLOCKPS_OK) {
      fprintf(stderr, "sync-train[%d]: round %d pull: %s\n", rank, k, blockps_last_error());
      return 2;
    }
    const double t_pull = now_s();
    size_t bad = 0, first_bad = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
      const double err = fabs((double)w[i] - (double)g[i]);
      /* The shard sums W float gradients and scales in float: a few ulps of |w| + |g|. */
      const double tol = 1e-5 * (1.0 + fabs((double)g[i]));
      if (err > worst) worst = err;
      if (err > tol && bad++ == 0) first_bad = i;
    }
    if (digests) fprintf(digests, "%d %016llx\n", k, (unsigned long long)fnv1a64(w, bytes));
    const double d = rms_distance(w, mean_t, n);
    printf("round %3d  |w - mean t| %.6g  push %.0f ms  pull (waits for the round) %.0f ms  max err %.2g\n", k, d,
           (t_push - t0) * 1e3, (t_pull - t_push) * 1e3, worst);
    if (bad) {
      fprintf(stderr,
              "sync-train[%d]: FAIL: round %d: %zu of %zu weights are not w - lr * (w - mean of the %d targets); "
              "first at element %zu: got %.9g, expected %.9g (a round applied without every worker's gradient, "
              "or pushes applied one by one)\n",
              rank, k, bad, n, workers, first_bad, w[first_bad], g[first_bad]);
      failed = 1;
    }
  }
  const double d_end = rms_distance(w, mean_t, n), want = d0 * pow(1.0 - lr, rounds) * 1.01 + 1e-6;
  if (!failed && d_end > want) {
    fprintf(stderr, "sync-train[%d]: FAIL: |w - mean t| %.6g -> %.6g after %d rounds; BSP gives <= %.6g\n", rank, d0,
            d_end, rounds, want);
    failed = 1;
  }
  if (digests) fclose(digests);
  blockps_cluster_close(c);
  if (!failed)
    printf("sync-train[%d]: PASS: %d rounds, every round the average of %d gradients applied once; |w - mean t| "
           "%.6g -> %.6g\n",
           rank, rounds, workers, d0, d_end);
  free(w);
  free(g);
  free(mine);
  free(mean_t);
  return failed;
}
