/* The C API (<blockps/blockps.h>) from strict C11: every call with NULLs, the cluster file's errors (missing,
 * not TOML, unknown key, unreachable LU, shard disagreeing with the file), each with its result code and a
 * message that says why; and, over plain files standing in for two shards' LUs (the posix transport, no tgtd:
 * files are disks without an optimizer, so what is pushed is what is pulled), the getters, transfers, wrong
 * sizes and ranges, asynchronous handles and callbacks, status pages, an I/O error and the per-thread message.
 *   blockps_c_api_test SCRATCH_DIR   (on a disk: O_DIRECT does not work on tmpfs; that part is then skipped)
 */
#define _XOPEN_SOURCE 700

#include <blockps/blockps.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

static int failures = 0;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: \"%s\")\n", __FILE__, __LINE__, #cond, \
              blockps_last_error());                                                               \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)

/* Checks a call's code and that the message says why (contains `needle`), or is "" after BLOCKPS_OK. */
#define EXPECT_RESULT(call, want, needle) expect_result((call), (want), (needle), #call, __LINE__)

static void expect_result(blockps_result got, blockps_result want, const char* needle, const char* call, int line) {
  const char* message = blockps_last_error();
  if (message == NULL) {
    fprintf(stderr, "line %d: %s: blockps_last_error() is NULL\n", line, call);
    ++failures;
    return;
  }
  if (got != want) {
    fprintf(stderr, "line %d: %s gave %s, want %s (message: \"%s\")\n", line, call, blockps_result_name(got),
            blockps_result_name(want), message);
    ++failures;
    return;
  }
  if (want == BLOCKPS_OK) {
    if (message[0] != '\0') {
      fprintf(stderr, "line %d: %s succeeded but the last error is \"%s\"\n", line, call, message);
      ++failures;
    }
    return;
  }
  if (needle != NULL && strstr(message, needle) == NULL) {
    fprintf(stderr, "line %d: %s: %s, but the message \"%s\" lacks \"%s\"\n", line, call, blockps_result_name(got),
            message, needle);
    ++failures;
    return;
  }
  printf("ok: %s -> %s: %s\n", call, blockps_result_name(got), message);
}

static char scratch[4096];

static const char* path_in_scratch(const char* name) {
  static char path[8192];
  snprintf(path, sizeof path, "%s/%s", scratch, name);
  return path;
}

static int write_text(const char* name, const char* text) {
  FILE* f = fopen(path_in_scratch(name), "w");
  if (f == NULL) return -1;
  fputs(text, f);
  return fclose(f);
}

/* A file of `bytes` bytes holding `data` (then zeros). */
static int write_bytes(const char* name, const void* data, size_t data_bytes, size_t bytes) {
  FILE* f = fopen(path_in_scratch(name), "wb");
  if (f == NULL) return -1;
  char* buffer = calloc(1, bytes);
  if (buffer == NULL) {
    fclose(f);
    return -1;
  }
  memcpy(buffer, data, data_bytes < bytes ? data_bytes : bytes);
  const size_t written = fwrite(buffer, 1, bytes, f);
  free(buffer);
  return fclose(f) == 0 && written == bytes ? 0 : -1;
}

static void test_version_and_names(void) {
  CHECK(blockps_api_version() == BLOCKPS_API_VERSION);
  CHECK(strcmp(blockps_last_error(), "") == 0);
  static const char* const names[] = {
      "BLOCKPS_OK",     "BLOCKPS_ERR_INVALID_ARGUMENT", "BLOCKPS_ERR_CONFIG",    "BLOCKPS_ERR_CONNECT",
      "BLOCKPS_ERR_IO", "BLOCKPS_ERR_MISMATCH",         "BLOCKPS_ERR_NO_MEMORY", "BLOCKPS_ERR_INTERNAL",
      "BLOCKPS_ERR_UNREACHABLE", "BLOCKPS_ERR_CONFLICT"};
  for (int i = 0; i < (int)(sizeof names / sizeof names[0]); ++i)
    CHECK(strcmp(blockps_result_name((blockps_result)i), names[i]) == 0);
  CHECK(strcmp(blockps_result_name((blockps_result)99), "BLOCKPS_ERR_UNKNOWN") == 0);
  CHECK(strcmp(blockps_result_name((blockps_result)-1), "BLOCKPS_ERR_UNKNOWN") == 0);
}

static void never_called(blockps_result result, const char* message, void* user) {
  (void)result, (void)message, (void)user;
  ++failures;
  fprintf(stderr, "a callback ran that should not have\n");
}

static void test_null_arguments(void) {
  char buffer[64];
  int sentinel = 0;
  blockps_cluster* cluster = (blockps_cluster*)&sentinel;
  EXPECT_RESULT(blockps_cluster_open(NULL, &cluster), BLOCKPS_ERR_INVALID_ARGUMENT, "cluster_file is NULL");
  CHECK(cluster == NULL);
  EXPECT_RESULT(blockps_cluster_open("cluster.toml", NULL), BLOCKPS_ERR_INVALID_ARGUMENT, "out is NULL");

  EXPECT_RESULT(blockps_push(NULL, buffer, sizeof buffer), BLOCKPS_ERR_INVALID_ARGUMENT,
                "blockps_push: cluster is NULL");
  EXPECT_RESULT(blockps_pull(NULL, buffer, sizeof buffer), BLOCKPS_ERR_INVALID_ARGUMENT,
                "blockps_pull: cluster is NULL");
  EXPECT_RESULT(blockps_push_blocks(NULL, 0, 1, buffer, sizeof buffer), BLOCKPS_ERR_INVALID_ARGUMENT,
                "cluster is NULL");
  EXPECT_RESULT(blockps_pull_blocks(NULL, 0, 1, buffer, sizeof buffer), BLOCKPS_ERR_INVALID_ARGUMENT,
                "cluster is NULL");
  EXPECT_RESULT(blockps_write_weights(NULL, buffer, sizeof buffer), BLOCKPS_ERR_INVALID_ARGUMENT, "cluster is NULL");
  EXPECT_RESULT(blockps_read_weights(NULL, buffer, sizeof buffer), BLOCKPS_ERR_INVALID_ARGUMENT, "cluster is NULL");
  EXPECT_RESULT(blockps_status_page(NULL, 0, buffer, sizeof buffer, NULL), BLOCKPS_ERR_INVALID_ARGUMENT,
                "blockps_status_page: cluster is NULL");

  blockps_op* op = (blockps_op*)&sentinel;
  EXPECT_RESULT(blockps_push_async(NULL, buffer, sizeof buffer, &op), BLOCKPS_ERR_INVALID_ARGUMENT, "cluster is NULL");
  CHECK(op == NULL);
  op = (blockps_op*)&sentinel;
  EXPECT_RESULT(blockps_pull_async(NULL, buffer, sizeof buffer, &op), BLOCKPS_ERR_INVALID_ARGUMENT, "cluster is NULL");
  CHECK(op == NULL);
  EXPECT_RESULT(blockps_push_blocks_async(NULL, 0, 1, buffer, sizeof buffer, &op), BLOCKPS_ERR_INVALID_ARGUMENT,
                "cluster is NULL");
  EXPECT_RESULT(blockps_pull_blocks_async(NULL, 0, 1, buffer, sizeof buffer, &op), BLOCKPS_ERR_INVALID_ARGUMENT,
                "cluster is NULL");
  EXPECT_RESULT(blockps_push_async(NULL, buffer, sizeof buffer, NULL), BLOCKPS_ERR_INVALID_ARGUMENT,
                "blockps_push_async: out is NULL");
  EXPECT_RESULT(blockps_pull_blocks_async(NULL, 0, 1, buffer, sizeof buffer, NULL), BLOCKPS_ERR_INVALID_ARGUMENT,
                "out is NULL");

  EXPECT_RESULT(blockps_op_wait(NULL), BLOCKPS_ERR_INVALID_ARGUMENT, "blockps_op_wait: op is NULL");
  EXPECT_RESULT(blockps_op_on_done(NULL, never_called, NULL), BLOCKPS_ERR_INVALID_ARGUMENT, "op is NULL");
  CHECK(blockps_op_ready(NULL) == -1);
  blockps_op_free(NULL);
  blockps_cluster_close(NULL);

  /* The getters give their documented value for NULL and leave the message of the last failure alone. */
  CHECK(blockps_cluster_model_bytes(NULL) == 0);
  CHECK(blockps_cluster_block_bytes(NULL) == 0);
  CHECK(blockps_cluster_block_count(NULL) == 0);
  CHECK(blockps_cluster_block_offset(NULL, 0) == UINT64_MAX);
  CHECK(strcmp(blockps_cluster_dtype(NULL), "") == 0);
  CHECK(blockps_cluster_element_bytes(NULL) == 0);
  CHECK(blockps_cluster_shard_count(NULL) == 0);
  CHECK(strcmp(blockps_cluster_shard_name(NULL, 0), "") == 0);
  CHECK(strstr(blockps_last_error(), "blockps_op_on_done: op is NULL") != NULL);
}

static void test_cluster_file_errors(void) {
  blockps_cluster* cluster = NULL;
  EXPECT_RESULT(blockps_cluster_open(path_in_scratch("missing.toml"), &cluster), BLOCKPS_ERR_CONFIG,
                "missing.toml: cannot read the cluster file: No such file or directory");
  CHECK(cluster == NULL);

  CHECK(write_text("bad.toml", "[model\nsize = \"1M\"\n") == 0);
  EXPECT_RESULT(blockps_cluster_open(path_in_scratch("bad.toml"), &cluster), BLOCKPS_ERR_CONFIG,
                "bad.toml:1:");  // file:line:column: not valid TOML
  CHECK(strstr(blockps_last_error(), "not valid TOML") != NULL);
  CHECK(cluster == NULL);

  CHECK(write_text("unknown.toml", "[model]\nsize = \"1M\"\ncolour = 3\n") == 0);
  EXPECT_RESULT(blockps_cluster_open(path_in_scratch("unknown.toml"), &cluster), BLOCKPS_ERR_CONFIG,
                "unknown key 'colour'");

  CHECK(write_text("noshards.toml", "[model]\nsize = \"1M\"\n") == 0);
  EXPECT_RESULT(blockps_cluster_open(path_in_scratch("noshards.toml"), &cluster), BLOCKPS_ERR_CONFIG,
                "no [[shard]] sections");

  /* Well-formed, but the LU is not there: CONNECT, naming the shard and the LU. */
  CHECK(write_text("unreachable.toml",
                   "[model]\nsize = \"1M\"\n[[shard]]\nname = \"lost\"\ngrad = \"/nonexistent/sdx\"\n"
                   "weights = \"/nonexistent/sdy\"\nstatus = \"/nonexistent/sdz\"\n") == 0);
  EXPECT_RESULT(blockps_cluster_open(path_in_scratch("unreachable.toml"), &cluster), BLOCKPS_ERR_CONNECT,
                "shard 'lost' grad LU (/nonexistent/sdx)");
  CHECK(cluster == NULL);
}

/* ---- A cluster of files --------------------------------------------------------------------------------- */

enum { kShards = 2, kBlock = 64 * 1024, kBlocks = 8, kLastBlock = 4096 };
static const uint64_t kModelBytes = (uint64_t)(kBlocks - 1) * kBlock + kLastBlock;

/* Stripe layout: block b on shard b % 2, back to back. */
static uint64_t shard_bytes(int shard) {
  uint64_t bytes = 0;
  for (int b = shard; b < kBlocks; b += kShards) bytes += b == kBlocks - 1 ? kLastBlock : kBlock;
  return bytes;
}

/* Writes the shard files (grad, weights, status page saying `dtype`) and the cluster file NAME. */
static int make_file_cluster(const char* name, const char* page_dtype) {
  char text[8192];
  int n = snprintf(text, sizeof text,
                   "[model]\nsize = %llu\ndtype = \"f32\"\nblock = \"64K\"\n[client]\nengine = \"psync\"\n"
                   "queue_depth = 4\nmax_request = \"128K\"\n",
                   (unsigned long long)kModelBytes);
  for (int s = 0; s < kShards; ++s) {
    char file[64], page[512];
    snprintf(file, sizeof file, "shard%d.grad", s);
    if (write_bytes(file, "", 0, (size_t)shard_bytes(s)) != 0) return -1;
    snprintf(file, sizeof file, "shard%d.weights", s);
    if (write_bytes(file, "", 0, (size_t)shard_bytes(s)) != 0) return -1;
    /* As a shard's page: its shape, its opt, no job, and the place the file gives it (nothing to write here). */
    snprintf(page, sizeof page,
             "{\"shard\": {\"size\": %llu, \"dtype\": \"%s\", \"block\": %d, \"opt\": \"sum\"}, \"counters\": {}, "
             "\"job\": {\"holder\": \"\"}, \"place\": {\"text\": \"m-capi %d/%d stripe\"}}",
             (unsigned long long)shard_bytes(s), page_dtype, kBlock, s, kShards);
    snprintf(file, sizeof file, "shard%d.status", s);
    if (write_bytes(file, page, strlen(page), 4096) != 0) return -1;
    n += snprintf(text + n, sizeof text - (size_t)n, "[[shard]]\nname = \"disk%d\"\n", s);
    n += snprintf(text + n, sizeof text - (size_t)n, "grad = \"%s/shard%d.grad\"\n", scratch, s);
    n += snprintf(text + n, sizeof text - (size_t)n, "weights = \"%s/shard%d.weights\"\n", scratch, s);
    n += snprintf(text + n, sizeof text - (size_t)n, "status = \"%s/shard%d.status\"\n", scratch, s);
  }
  return write_text(name, text);
}

static void fill(float* v, size_t n, int seed) {
  for (size_t i = 0; i < n; ++i) v[i] = (float)((int)((i * 7 + (size_t)seed * 13) % 97) - 48);
}

struct done_record {
  pthread_mutex_t mutex;
  int calls;
  blockps_result result;
  char message[1024];
};

static void record_done(blockps_result result, const char* message, void* user) {
  struct done_record* r = user;
  pthread_mutex_lock(&r->mutex);
  ++r->calls;
  r->result = result;
  snprintf(r->message, sizeof r->message, "%s", message);
  pthread_mutex_unlock(&r->mutex);
}

static void* other_thread(void* arg) {
  (void)arg;
  return (void*)blockps_last_error();
}

/* Set when a part could not run here: the run then ends with 77, which ctest counts as a skip, not a pass. */
static const char* skipped_part;

static void test_file_cluster(void) {
  struct statfs fs;
  if (statfs(scratch, &fs) == 0 && fs.f_type == 0x01021994 /* TMPFS_MAGIC */) {
    printf("SKIPPED: the file cluster part: %s is tmpfs (no O_DIRECT); run with a scratch dir on a disk\n", scratch);
    skipped_part = "the file cluster part (transfers): the scratch directory is on tmpfs, which has no O_DIRECT";
    return;
  }
  blockps_cluster* cluster = NULL;

  /* A status page that disagrees with the file: MISMATCH, naming the shard and both values. */
  CHECK(make_file_cluster("mismatch.toml", "bf16") == 0);
  EXPECT_RESULT(blockps_cluster_open(path_in_scratch("mismatch.toml"), &cluster), BLOCKPS_ERR_MISMATCH,
                "status page says dtype = bf16, the cluster file says dtype = f32");
  CHECK(cluster == NULL);

  CHECK(make_file_cluster("files.toml", "f32") == 0);
  EXPECT_RESULT(blockps_cluster_open(path_in_scratch("files.toml"), &cluster), BLOCKPS_OK, NULL);
  if (cluster == NULL) return;
  CHECK(blockps_cluster_model_bytes(cluster) == kModelBytes);
  CHECK(blockps_cluster_block_bytes(cluster) == kBlock);
  CHECK(blockps_cluster_block_count(cluster) == kBlocks);
  CHECK(blockps_cluster_block_offset(cluster, 3) == 3 * (uint64_t)kBlock);
  CHECK(blockps_cluster_block_offset(cluster, kBlocks) == kModelBytes);
  CHECK(blockps_cluster_block_offset(cluster, kBlocks + 1) == UINT64_MAX);
  CHECK(strcmp(blockps_cluster_dtype(cluster), "f32") == 0);
  CHECK(blockps_cluster_element_bytes(cluster) == 4);
  CHECK(blockps_cluster_shard_count(cluster) == kShards);
  CHECK(strcmp(blockps_cluster_shard_name(cluster, 1), "disk1") == 0);
  CHECK(strcmp(blockps_cluster_shard_name(cluster, 2), "") == 0);

  const size_t n = (size_t)kModelBytes / 4;
  float* grads = malloc(n * 4);
  float* pulled = malloc(n * 4);
  float* weights = malloc(n * 4);
  if (grads == NULL || pulled == NULL || weights == NULL) {
    CHECK(!"out of memory in the test");
    free(grads), free(pulled), free(weights);
    blockps_cluster_close(cluster);
    return;
  }
  fill(grads, n, 1);
  fill(weights, n, 2);

  /* Wrong sizes, ranges and NULL buffers: INVALID_ARGUMENT, saying what was given and what is needed. */
  EXPECT_RESULT(blockps_push(cluster, grads, 100), BLOCKPS_ERR_INVALID_ARGUMENT,
                "push: the buffer holds 100 bytes, blocks [0, 8) are 462848 bytes");
  EXPECT_RESULT(blockps_pull(cluster, pulled, (size_t)kModelBytes + 4), BLOCKPS_ERR_INVALID_ARGUMENT,
                "pull: the buffer holds 462852 bytes");
  EXPECT_RESULT(blockps_pull(cluster, NULL, (size_t)kModelBytes), BLOCKPS_ERR_INVALID_ARGUMENT,
                "blockps_pull: the buffer is NULL with bytes = 462848");
  EXPECT_RESULT(blockps_push(cluster, NULL, 0), BLOCKPS_ERR_INVALID_ARGUMENT, "the buffer holds 0 bytes");
  EXPECT_RESULT(blockps_push_blocks(cluster, 7, 2, grads, kBlock), BLOCKPS_ERR_INVALID_ARGUMENT,
                "push: blocks [7, 9) are outside the model's 8 blocks");
  EXPECT_RESULT(blockps_pull_blocks(cluster, 2, 2, pulled, kBlock), BLOCKPS_ERR_INVALID_ARGUMENT,
                "pull: the buffer holds 65536 bytes, blocks [2, 4) are 131072 bytes");
  EXPECT_RESULT(blockps_write_weights(cluster, weights, 512), BLOCKPS_ERR_INVALID_ARGUMENT,
                "write_weights: the buffer holds 512 bytes");
  EXPECT_RESULT(blockps_read_weights(cluster, weights, 512), BLOCKPS_ERR_INVALID_ARGUMENT,
                "read_weights: the buffer holds 512 bytes");
  EXPECT_RESULT(blockps_pull_blocks(cluster, 8, 0, NULL, 0), BLOCKPS_OK, NULL); /* empty range: a no-op */
  blockps_op* op = NULL;
  EXPECT_RESULT(blockps_push_async(cluster, grads, 100, &op), BLOCKPS_ERR_INVALID_ARGUMENT,
                "push: the buffer holds 100 bytes");
  CHECK(op == NULL);
  EXPECT_RESULT(blockps_pull_blocks_async(cluster, 9, 1, pulled, kBlock, &op), BLOCKPS_ERR_INVALID_ARGUMENT,
                "pull: blocks [9, 10) are outside the model's 8 blocks");
  CHECK(op == NULL);

  /* Files are disks without an optimizer: a push is what the next pull returns. */
  EXPECT_RESULT(blockps_push(cluster, grads, (size_t)kModelBytes), BLOCKPS_OK, NULL);
  memset(pulled, 0, n * 4);
  EXPECT_RESULT(blockps_pull(cluster, pulled, (size_t)kModelBytes), BLOCKPS_OK, NULL);
  CHECK(memcmp(pulled, grads, n * 4) == 0);
  EXPECT_RESULT(blockps_write_weights(cluster, weights, (size_t)kModelBytes), BLOCKPS_OK, NULL);
  memset(pulled, 0, n * 4);
  EXPECT_RESULT(blockps_read_weights(cluster, pulled, (size_t)kModelBytes), BLOCKPS_OK, NULL);
  CHECK(memcmp(pulled, weights, n * 4) == 0);

  /* Blocks [6, 8): the short last block included. */
  const uint64_t first = 6, count = 2;
  const uint64_t offset = blockps_cluster_block_offset(cluster, first);
  const size_t part = (size_t)(blockps_cluster_block_offset(cluster, first + count) - offset);
  CHECK(part == kBlock + kLastBlock);
  float ones[(kBlock + kLastBlock) / 4];
  for (size_t i = 0; i < sizeof ones / 4; ++i) ones[i] = 1.0f;
  EXPECT_RESULT(blockps_push_blocks(cluster, first, count, ones, part), BLOCKPS_OK, NULL);
  float back[(kBlock + kLastBlock) / 4];
  EXPECT_RESULT(blockps_pull_blocks(cluster, first, count, back, part), BLOCKPS_OK, NULL);
  CHECK(memcmp(back, ones, part) == 0);
  for (size_t i = (size_t)offset / 4; i < n; ++i) grads[i] = 1.0f;

  /* Asynchronous: handles, ready, wait (twice), a callback set before and one set after the end. */
  struct done_record before = {PTHREAD_MUTEX_INITIALIZER, 0, BLOCKPS_ERR_INTERNAL, ""};
  struct done_record after = {PTHREAD_MUTEX_INITIALIZER, 0, BLOCKPS_ERR_INTERNAL, ""};
  blockps_op* pull_op = NULL;
  memset(pulled, 0, n * 4);
  EXPECT_RESULT(blockps_pull_async(cluster, pulled, (size_t)kModelBytes, &pull_op), BLOCKPS_OK, NULL);
  CHECK(pull_op != NULL);
  EXPECT_RESULT(blockps_op_on_done(pull_op, record_done, &before), BLOCKPS_OK, NULL);
  EXPECT_RESULT(blockps_op_on_done(pull_op, record_done, &before), BLOCKPS_ERR_INVALID_ARGUMENT,
                "already has a callback");
  EXPECT_RESULT(blockps_op_on_done(pull_op, NULL, NULL), BLOCKPS_ERR_INVALID_ARGUMENT, "on_done is NULL");
  EXPECT_RESULT(blockps_op_wait(pull_op), BLOCKPS_OK, NULL);
  EXPECT_RESULT(blockps_op_wait(pull_op), BLOCKPS_OK, NULL);
  CHECK(blockps_op_ready(pull_op) == 1);
  CHECK(memcmp(pulled, grads, n * 4) == 0);
  blockps_op_free(pull_op);
  pthread_mutex_lock(&before.mutex);
  const int before_calls = before.calls; /* the I/O thread may still be in the callback after wait */
  pthread_mutex_unlock(&before.mutex);
  CHECK(before_calls <= 1);

  blockps_op* push_op = NULL;
  EXPECT_RESULT(blockps_push_blocks_async(cluster, 0, 1, ones, kBlock, &push_op), BLOCKPS_OK, NULL);
  EXPECT_RESULT(blockps_op_wait(push_op), BLOCKPS_OK, NULL);
  EXPECT_RESULT(blockps_op_on_done(push_op, record_done, &after), BLOCKPS_OK, NULL);
  CHECK(after.calls == 1 && after.result == BLOCKPS_OK && after.message[0] == '\0'); /* ran in the call */
  blockps_op_free(push_op);
  for (size_t i = 0; i < kBlock / 4; ++i) grads[i] = 1.0f;
  blockps_op* blocks_op = NULL;
  EXPECT_RESULT(blockps_pull_blocks_async(cluster, 0, kBlocks, pulled, (size_t)kModelBytes, &blocks_op), BLOCKPS_OK,
                NULL);
  blockps_op_free(blocks_op); /* waits: the buffer is ours again */
  CHECK(memcmp(pulled, grads, n * 4) == 0);

  /* Status pages: the JSON, sizes, a buffer too small, a shard out of range. */
  char json[4096];
  size_t json_bytes = 0;
  EXPECT_RESULT(blockps_status_page(cluster, 1, json, sizeof json, &json_bytes), BLOCKPS_OK, NULL);
  CHECK(strstr(json, "\"dtype\": \"f32\"") != NULL);
  CHECK(json_bytes == strlen(json));
  EXPECT_RESULT(blockps_status_page(cluster, 0, NULL, 0, &json_bytes), BLOCKPS_ERR_INVALID_ARGUMENT,
                "the buffer holds 0 bytes, the status page of shard 'disk0' needs");
  CHECK(json_bytes > 0);
  EXPECT_RESULT(blockps_status_page(cluster, 0, NULL, 10, NULL), BLOCKPS_ERR_INVALID_ARGUMENT, "json is NULL");
  EXPECT_RESULT(blockps_status_page(cluster, 2, json, sizeof json, NULL), BLOCKPS_ERR_INVALID_ARGUMENT,
                "shard 2 is out of range: the cluster has 2 shards");

  /* The message is per thread: another thread has none. */
  EXPECT_RESULT(blockps_push(cluster, grads, 3), BLOCKPS_ERR_INVALID_ARGUMENT, "the buffer holds 3 bytes");
  pthread_t thread;
  void* seen = NULL;
  CHECK(pthread_create(&thread, NULL, other_thread, NULL) == 0 && pthread_join(thread, &seen) == 0);
  CHECK(seen != NULL && strcmp((const char*)seen, "") == 0);

  /* A shard's grad LU cut short under the open cluster: IO, naming the shard, LU and offset; async too. */
  CHECK(truncate(path_in_scratch("shard1.grad"), 0) == 0);
  EXPECT_RESULT(blockps_pull(cluster, pulled, (size_t)kModelBytes), BLOCKPS_ERR_IO, "shard 'disk1' grad LU");
  CHECK(strstr(blockps_last_error(), "shard byte offset") != NULL);
  struct done_record failed = {PTHREAD_MUTEX_INITIALIZER, 0, BLOCKPS_OK, ""};
  op = NULL;
  EXPECT_RESULT(blockps_pull_async(cluster, pulled, (size_t)kModelBytes, &op), BLOCKPS_OK, NULL);
  EXPECT_RESULT(blockps_op_on_done(op, record_done, &failed), BLOCKPS_OK, NULL);
  EXPECT_RESULT(blockps_op_wait(op), BLOCKPS_ERR_IO, "shard 'disk1' grad LU");
  blockps_cluster_close(cluster); /* joins the I/O threads: every callback has run */
  CHECK(failed.calls == 1 && failed.result == BLOCKPS_ERR_IO && strstr(failed.message, "disk1") != NULL);
  CHECK(blockps_op_ready(op) == 1); /* a handle outlives its cluster */
  EXPECT_RESULT(blockps_op_wait(op), BLOCKPS_ERR_IO, "shard 'disk1' grad LU");
  blockps_op_free(op);
  CHECK(before.calls == 1 && before.result == BLOCKPS_OK);
  free(grads), free(pulled), free(weights);
}

/* (API version 6) Opening with options: the defaults, each wrong field refused before anything is sent, the kind of
 * shard, the job and model getters, claim's arguments. Over the file cluster of test_file_cluster (a job would write
 * its claim into the status file, so none is claimed here: tests/integration/jobs/test_job_claim.cpp claims real shards). */
static void test_open_options(void) {
  blockps_open_options_init(NULL);
  blockps_open_options options;
  memset(&options, 0xff, sizeof options);
  blockps_open_options_init(&options);
  CHECK(options.struct_size == sizeof options);
  CHECK(options.job == NULL && options.takeover == 0 && options.replace_place == 0);
  CHECK(options.expect == BLOCKPS_SHARD_ANY);
  CHECK(strcmp(blockps_cluster_job(NULL), "") == 0);
  CHECK(strcmp(blockps_cluster_model(NULL), "") == 0);
  EXPECT_RESULT(blockps_cluster_claim(NULL, "A", 0), BLOCKPS_ERR_INVALID_ARGUMENT, "cluster is NULL");

  blockps_cluster* cluster = NULL;
  const char* file = path_in_scratch("files.toml");
  EXPECT_RESULT(blockps_cluster_open_with(NULL, &options, &cluster), BLOCKPS_ERR_INVALID_ARGUMENT,
                "cluster_file is NULL");
  EXPECT_RESULT(blockps_cluster_open_with(file, &options, NULL), BLOCKPS_ERR_INVALID_ARGUMENT, "out is NULL");
  blockps_open_options old = options;
  old.struct_size = sizeof(size_t);
  EXPECT_RESULT(blockps_cluster_open_with(file, &old, &cluster), BLOCKPS_ERR_INVALID_ARGUMENT,
                "options->struct_size = 8: must be at least");
  blockps_open_options odd = options;
  odd.expect = (blockps_shard_kind)7;
  EXPECT_RESULT(blockps_cluster_open_with(file, &odd, &cluster), BLOCKPS_ERR_INVALID_ARGUMENT,
                "options->expect = 7: must be BLOCKPS_SHARD_ANY (0)");
  blockps_open_options blank = options;
  blank.job = "my job";
  EXPECT_RESULT(blockps_cluster_open_with(file, &blank, &cluster), BLOCKPS_ERR_INVALID_ARGUMENT,
                "job = \"my job\": must be 1 to 128 characters of A-Z a-z 0-9 . _ : @ / + -");
  blockps_open_options nameless = options;
  nameless.job = "";
  nameless.takeover = 1;
  EXPECT_RESULT(blockps_cluster_open_with(file, &nameless, &cluster), BLOCKPS_ERR_INVALID_ARGUMENT,
                "takeover needs a job");
  CHECK(cluster == NULL);

  struct statfs fs;
  if (statfs(scratch, &fs) == 0 && fs.f_type == 0x01021994 /* TMPFS_MAGIC */) return; /* as test_file_cluster */
  CHECK(make_file_cluster("files.toml", "f32") == 0);
  blockps_open_options averaging = options;
  averaging.expect = BLOCKPS_SHARD_AVERAGING;
  EXPECT_RESULT(blockps_cluster_open_with(file, &averaging, &cluster), BLOCKPS_ERR_MISMATCH, "shard 'disk0' (");
  CHECK(strstr(blockps_last_error(), "runs opt=sum: it steps its optimizer on every push") != NULL);
  CHECK(cluster == NULL);
  blockps_open_options optimizer = options;
  optimizer.expect = BLOCKPS_SHARD_OPTIMIZER;
  optimizer.job = "";
  EXPECT_RESULT(blockps_cluster_open_with(file, &optimizer, &cluster), BLOCKPS_OK, NULL);
  if (cluster == NULL) return;
  CHECK(strcmp(blockps_cluster_job(cluster), "") == 0);
  CHECK(strcmp(blockps_cluster_model(cluster), "m-capi") == 0);
  EXPECT_RESULT(blockps_cluster_claim(cluster, NULL, 0), BLOCKPS_ERR_INVALID_ARGUMENT, "job is NULL");
  EXPECT_RESULT(blockps_cluster_claim(cluster, "a=b", 0), BLOCKPS_ERR_INVALID_ARGUMENT, "job = \"a=b\": must be");
  blockps_cluster_close(cluster);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
    return 2;
  }
  snprintf(scratch, sizeof scratch, "%s/c-api-XXXXXX", argv[1]);
  if (mkdir(argv[1], 0755) != 0 && errno != EEXIST) {
    perror(argv[1]);
    return 2;
  }
  if (mkdtemp(scratch) == NULL) {
    perror(scratch);
    return 2;
  }
  test_version_and_names();
  test_null_arguments();
  test_cluster_file_errors();
  test_file_cluster();
  test_open_options();
  char command[8300];
  snprintf(command, sizeof command, "rm -rf '%s'", scratch);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", scratch);
  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  if (skipped_part != NULL) {
    printf("SKIPPED: %s; every other check passed\n", skipped_part);
    return 77;
  }
  printf("all checks passed\n");
  return 0;
}
