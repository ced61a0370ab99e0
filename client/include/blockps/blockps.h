/* libblockps's C API: push gradients to and pull weights from a blockps parameter server, as a worker.
 * Installed as <blockps/blockps.h>; link with -lblockps (pkg-config blockps, or CMake find_package(blockps)
 * and the target blockps::blockps).
 *
 *   blockps_cluster* c = NULL;
 *   if (blockps_cluster_open("cluster.toml", &c) != BLOCKPS_OK) {
 *     fprintf(stderr, "%s\n", blockps_last_error());
 *     return 1;
 *   }
 *   size_t n = blockps_cluster_model_bytes(c);                 // wire bytes: elements x dtype size
 *   blockps_pull(c, weights, n);                                // blocking
 *   blockps_op* op = NULL;
 *   blockps_push_async(c, grads, n, &op);                       // asynchronous
 *   ... blockps_op_wait(op); blockps_op_free(op);
 *   blockps_cluster_close(c);
 *
 * The model is model_bytes wire bytes cut into blocks of block_bytes (the last block may be shorter); each
 * block lives on one shard. Every call moves whole blocks; all shards work in parallel.
 *
 * Stability: the API is versioned (BLOCKPS_API_VERSION, blockps_api_version()); a version only adds calls and
 * result codes; existing calls keep their signature and meaning. The library is libblockps.so.0 and exports
 * only the blockps_* symbols declared here.
 *
 * Errors: every call that can fail returns a blockps_result and sets this thread's last error message
 * (blockps_last_error): "" after a call that succeeded, otherwise what went wrong: the shard, the LU, the byte
 * offsets and the reason (SCSI status and sense, errno), or the cluster file's key, the value seen and what is
 * allowed. No call aborts the process, throws, or lets a C++ exception escape; a NULL where a handle or buffer
 * is required is BLOCKPS_ERR_INVALID_ARGUMENT, never a crash. Calls that return a value (not a result) return
 * 0, "" or the documented value for a NULL handle, and leave the last error message as it was.
 *
 * Thread-safety: a blockps_cluster may be used from several threads at once; calls are queued on each shard's
 * I/O thread and run there one after another. A blockps_op may be waited on from any thread, and from several.
 * blockps_cluster_close and blockps_op_free must not race with other calls on the same handle.
 */
#ifndef BLOCKPS_BLOCKPS_H
#define BLOCKPS_BLOCKPS_H

#include <stddef.h>
#include <stdint.h>

/* The version of the API this header declares. Compare with blockps_api_version() to check that the library
 * loaded at run time is at least as new as the header the program was built with. */
#define BLOCKPS_API_VERSION 9

#if defined(__GNUC__)
#define BLOCKPS_EXPORT __attribute__((visibility("default")))
#else
#define BLOCKPS_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Result codes. The values are part of the ABI and never change; later versions may add codes, so treat an
 * unknown one as a failure. */
typedef enum blockps_result {
  BLOCKPS_OK = 0,
  /* A NULL handle or buffer, a buffer whose size is not what the blocks need, blocks outside the model, a
   * shard index out of range, a status-page buffer too small. Nothing was sent. */
  BLOCKPS_ERR_INVALID_ARGUMENT = 1,
  /* The cluster file cannot be read, is not TOML, or has a key that is missing, unknown or out of range. */
  BLOCKPS_ERR_CONFIG = 2,
  /* An LU of a shard cannot be reached, logged in to or opened. */
  BLOCKPS_ERR_CONNECT = 3,
  /* A read or write on a shard's LU failed (SCSI error, disconnect, errno). Part of the transfer may have
   * happened: a push may have reached some blocks. */
  BLOCKPS_ERR_IO = 4,
  /* A shard disagrees with the cluster file: LU capacity, or the status page's size, dtype or block. */
  BLOCKPS_ERR_MISMATCH = 5,
  /* Memory ran out in the call. */
  BLOCKPS_ERR_NO_MEMORY = 6,
  /* Anything else: an error the library could not classify (e.g. an exception on an I/O thread, such as
   * memory running out there). The message says what. */
  BLOCKPS_ERR_INTERNAL = 7,
  /* (API version 4) A shard's session was lost and could not be logged in again within the cluster file's
   * [client] reconnect_s; the message names the shard, the LU and the last login error. Pulls of the operation
   * were retried on the new session while it could be had; a push whose answer was lost was not sent again
   * (it may have been applied once, never twice). */
  BLOCKPS_ERR_UNREACHABLE = 8,
  /* (API version 7) Another job holds a shard: at open its claim refused this worker's job (the message names the
   * holder and how to take the shards over), or later a command was answered RESERVATION CONFLICT (the shards were
   * taken over). Before version 7 both were BLOCKPS_ERR_IO. */
  BLOCKPS_ERR_CONFLICT = 9
} blockps_result;

/* A connected cluster (every LU of every shard). */
typedef struct blockps_cluster blockps_cluster;
/* An asynchronous push or pull in flight (or finished). */
typedef struct blockps_op blockps_op;

/* ---- Version and errors ------------------------------------------------------------------------------ */

/* The API version of the library loaded at run time (BLOCKPS_API_VERSION of the header it was built from).
 * Never fails. */
BLOCKPS_EXPORT int blockps_api_version(void);

/* The code's name, e.g. "BLOCKPS_ERR_IO"; "BLOCKPS_ERR_UNKNOWN" for a value this version does not know.
 * A static string; never NULL. */
BLOCKPS_EXPORT const char* blockps_result_name(blockps_result result);

/* This thread's last error message: "" when the last call that returns a blockps_result succeeded (or none
 * was made yet), else what went wrong. The text stays valid until the next blockps_* call on this thread.
 * Never NULL. */
BLOCKPS_EXPORT const char* blockps_last_error(void);

/* (API version 7) Where the library's log lines go: what it tells a user without failing a call (a session lost
 * and logged in again, pushes given up, a claim it waits out). `sink` gets one NUL-terminated line, without a
 * newline, starting "blockps: ", from any thread (also the library's I/O threads, while a call runs): keep it short
 * and thread-safe. NULL: stderr, the default. Never fails. */
BLOCKPS_EXPORT void blockps_set_log(void (*sink)(const char* line));

/* ---- The cluster ------------------------------------------------------------------------------------- */

/* Loads the cluster file (TOML, docs/OPTIONS.md), connects every LU of every shard (in parallel), and checks
 * that each grad and weights LU has the capacity the layout gives its shard and that each shard's status page
 * agrees with the file on size, dtype and block. On success *out is the cluster, else NULL.
 * Errors: INVALID_ARGUMENT (cluster_file or out NULL), CONFIG (file unreadable or wrong), CONNECT, IO (reading
 * a status page), MISMATCH, NO_MEMORY. */
BLOCKPS_EXPORT blockps_result blockps_cluster_open(const char* cluster_file, blockps_cluster** out);

/* (API version 6) Which kind of shard a worker needs: checked against every shard's opt at open, before anything
 * is written. */
typedef enum blockps_shard_kind {
  BLOCKPS_SHARD_ANY = 0,       /* no check */
  BLOCKPS_SHARD_OPTIMIZER = 1, /* a shard that steps an optimizer on each push (every opt but average) */
  BLOCKPS_SHARD_AVERAGING = 2  /* opt=average: a READ after a push returns the round's average gradient */
} blockps_shard_kind;

/* (API version 6) How a worker opens a cluster: the job it belongs to and what it expects of the shards
 * (docs/OPTIONS.md, "Jobs and places"). Fill with blockps_open_options_init, then change fields: later versions
 * add fields at the end, and struct_size tells the library which it was given. */
typedef struct blockps_open_options {
  size_t struct_size; /* sizeof(blockps_open_options), as blockps_open_options_init sets it */
  /* The job this worker belongs to: every session of every shard joins it, and a shard another job holds refuses
   * (BLOCKPS_ERR_CONFLICT, naming the holder and how to take it over). NULL (the default): the cluster file's
   * [client] job, else the environment's BLOCKPS_JOB, else none; "": none (no claim: the weights of a held shard
   * may be read, pushes are refused). 1 to 128 characters of A-Z a-z 0-9 . _ : @ / + -. Copied by the call. */
  const char* job;
  int takeover;      /* 0/1, default 0: claim the shards even though another job holds them (needs a job) */
  int replace_place; /* 0/1, default 0: give each shard the place this file gives it even where it holds another
                        (a deliberate re-layout or a new model); otherwise such a shard is BLOCKPS_ERR_MISMATCH */
  /* a blockps_shard_kind (an int, so that a value outside the enum is refused, not undefined): default
   * BLOCKPS_SHARD_ANY; another kind of shard: BLOCKPS_ERR_MISMATCH */
  int expect;
} blockps_open_options;

/* The defaults (struct_size set). NULL: no-op. */
BLOCKPS_EXPORT void blockps_open_options_init(blockps_open_options* options);

/* (API version 6) blockps_cluster_open with options (NULL: the defaults, which blockps_cluster_open uses too).
 * After the checks of blockps_cluster_open, in this order: every shard is of the kind `expect`; every shard holds
 * the place the file gives it (shard i of S of the model, in the file's layout; a shard that holds none takes it);
 * the job claims every shard from every session. Errors: as blockps_cluster_open; INVALID_ARGUMENT (a job name
 * not allowed, takeover without a job, struct_size smaller than version 6's, an unknown expect); MISMATCH (a
 * shard of another kind, or in another place: the message names the shard, both places and the fix); IO (a
 * shard held by another job: the message names the holder and how to take it over). */
BLOCKPS_EXPORT blockps_result blockps_cluster_open_with(const char* cluster_file, const blockps_open_options* options,
                                                        blockps_cluster** out);

/* (API version 6) The job the cluster's sessions belong to ("" none), and the model whose place its shards hold.
 * "" for NULL. Valid until the cluster is closed or claimed again. */
BLOCKPS_EXPORT const char* blockps_cluster_job(const blockps_cluster* cluster);
BLOCKPS_EXPORT const char* blockps_cluster_model(const blockps_cluster* cluster);

/* (API version 6) Joins every session of every shard to job `job` (takeover 1: also shards another job holds).
 * Errors: INVALID_ARGUMENT (NULL cluster or job, a name not allowed), IO (a shard held by another job), CONNECT /
 * UNREACHABLE. */
BLOCKPS_EXPORT blockps_result blockps_cluster_claim(blockps_cluster* cluster, const char* job, int takeover);

/* Waits for the operations in flight on the cluster, then closes every session and frees it. Handles of
 * operations started on it stay valid (they are finished) and still need blockps_op_free. NULL: no-op. */
BLOCKPS_EXPORT void blockps_cluster_close(blockps_cluster* cluster);

/* The model's size in wire bytes (elements x dtype size): what push, pull and the weights calls move. 0 for
 * NULL. */
BLOCKPS_EXPORT uint64_t blockps_cluster_model_bytes(const blockps_cluster* cluster);
/* The aggregation block in wire bytes (the last block may be shorter). 0 for NULL. */
BLOCKPS_EXPORT uint64_t blockps_cluster_block_bytes(const blockps_cluster* cluster);
/* The number of blocks in the model. 0 for NULL. */
BLOCKPS_EXPORT uint64_t blockps_cluster_block_count(const blockps_cluster* cluster);
/* The model byte offset where block `block` starts; block == block_count gives model_bytes. The buffer for
 * blocks [first, first + count) is offset(first + count) - offset(first) bytes. UINT64_MAX for NULL or a block
 * beyond block_count. */
BLOCKPS_EXPORT uint64_t blockps_cluster_block_offset(const blockps_cluster* cluster, uint64_t block);
/* The element format on the wire: "f32", "bf16" or "f16". "" for NULL. */
BLOCKPS_EXPORT const char* blockps_cluster_dtype(const blockps_cluster* cluster);
/* Bytes per element of that format (4 or 2). 0 for NULL. */
BLOCKPS_EXPORT size_t blockps_cluster_element_bytes(const blockps_cluster* cluster);
/* The number of shards. 0 for NULL. */
BLOCKPS_EXPORT size_t blockps_cluster_shard_count(const blockps_cluster* cluster);
/* Shard `index`'s name from the cluster file (index < shard count). "" for NULL or an index out of range.
 * Valid until the cluster is closed. */
BLOCKPS_EXPORT const char* blockps_cluster_shard_name(const blockps_cluster* cluster, size_t index);

/* ---- Blocking transfers ------------------------------------------------------------------------------ */
/* Each returns when every shard has finished its part. `bytes` must be exactly what the blocks hold
 * (model_bytes for the whole model). Errors: INVALID_ARGUMENT (NULL cluster or buffer, wrong size, blocks
 * outside the model; nothing sent), IO (naming the shard, LU and offsets), NO_MEMORY. */

/* Writes gradients to the grad LUs: each shard applies its optimizer to its blocks. */
BLOCKPS_EXPORT blockps_result blockps_push(blockps_cluster* cluster, const void* grads, size_t bytes);
/* Reads the current weights (through the grad LUs) into `weights`. */
BLOCKPS_EXPORT blockps_result blockps_pull(blockps_cluster* cluster, void* weights, size_t bytes);
/* The same for global blocks [first_block, first_block + block_count): the buffer holds exactly those blocks'
 * bytes, from model offset blockps_cluster_block_offset(first_block). block_count 0 is a no-op (bytes 0; the
 * buffer may then be NULL). */
BLOCKPS_EXPORT blockps_result blockps_push_blocks(blockps_cluster* cluster, uint64_t first_block, uint64_t block_count,
                                                  const void* grads, size_t bytes);
BLOCKPS_EXPORT blockps_result blockps_pull_blocks(blockps_cluster* cluster, uint64_t first_block, uint64_t block_count,
                                                  void* weights, size_t bytes);
/* (API version 3) Push `grads` and pull the new weights into `weights` in one pipelined operation: each
 * shard's queue carries WRITEs and READs at once, a run's READ issued as soon as its WRITE completed, so both
 * directions of every link are busy (blockps_push then blockps_pull uses one at a time). The weights pulled for
 * a block always include this push of it (async shards apply a push when its WRITE completes; a sync shard
 * parks the READ until the round is applied). `weights` may be the same buffer as `grads`. Both buffers are
 * `bytes` long. One session per shard, so sync shards count this worker once. */
BLOCKPS_EXPORT blockps_result blockps_exchange(blockps_cluster* cluster, const void* grads, void* weights,
                                               size_t bytes);
BLOCKPS_EXPORT blockps_result blockps_exchange_blocks(blockps_cluster* cluster, uint64_t first_block,
                                                      uint64_t block_count, const void* grads, void* weights,
                                                      size_t bytes);
/* The weights LUs as a disk: assign the whole model's weights (initialise, restore) or read them (snapshot).
 * No optimizer runs. */
BLOCKPS_EXPORT blockps_result blockps_write_weights(blockps_cluster* cluster, const void* weights, size_t bytes);
BLOCKPS_EXPORT blockps_result blockps_read_weights(blockps_cluster* cluster, void* weights, size_t bytes);

/* Shard `shard`'s status page (the status LU's JSON: the shard's settings, counters, last checkpoint) as a
 * NUL-terminated string in `json` of `json_capacity` bytes. *json_bytes (if not NULL) gets the text's length
 * without the NUL, also when the buffer is too small. Reads every shard's page (at most 1 MiB each).
 *
 * Errors: INVALID_ARGUMENT (NULL cluster, NULL json with capacity > 0, shard out of range, buffer too small:
 * then nothing is written but *json_bytes), IO, NO_MEMORY. */
BLOCKPS_EXPORT blockps_result blockps_status_page(blockps_cluster* cluster, size_t shard, char* json,
                                                  size_t json_capacity, size_t* json_bytes);

/* (API version 9) An elastic job's start (docs/DEPLOY.md, "Elastic jobs"): its hosts each run a launcher of their own
 * and meet only at the shards, so the first to ask sets the weights and the others take them. Asks the cluster
 * file's first shard (control line init-weights: it grants the first session that asks while its weights are unset).
 * When it grants this worker, set_weights(user) writes the weights (blockps_write_weights, from the caller's thread),
 * init-done follows and *set_them is 1. Otherwise it waits, reading that shard's status page every 50 ms, until
 * another worker set them (asking again whenever the grant lapsed: its holder's session gone), and *set_them is 0:
 * read them then. A set_weights that does not return BLOCKPS_OK: its result is returned, and this worker keeps the
 * grant until its sessions close (blockps_cluster_close). Errors: INVALID_ARGUMENT (NULL cluster, set_weights or
 * set_them; patience_ms 0), IO (a shard refused the lines: its admins=; or patience_ms passed with the grant another
 * worker's: the message names it), MISMATCH (a shard module older than this library). */
typedef blockps_result (*blockps_set_weights_fn)(void* user);
BLOCKPS_EXPORT blockps_result blockps_set_or_take_weights(blockps_cluster* cluster, blockps_set_weights_fn set_weights,
                                                          void* user, uint64_t patience_ms, int* set_them);

/* (API version 5) What one shard's sessions (its three LUs) have done and recovered from since the cluster
 * opened. Each kind of recovery is also logged (blockps_set_log; stderr by default) ("blockps: shard 'S' grad LU (URL):
 * ..."), once per batch that needed it. */
typedef struct blockps_shard_counters {
  uint64_t commands;                  /* SCSI commands issued */
  uint64_t reconnects;                /* sessions lost and logged in again ([client] reconnect_s) */
  uint64_t unanswered_pushes_dropped; /* WRITEs given up: the session was lost before their answer (never sent
                                         twice, so their gradients may be missing from the shard) */
  uint64_t unit_attentions_resent;    /* commands sent again after a UNIT ATTENTION (LUs changed, tgtd restarted) */
} blockps_shard_counters;

/* Fills *out with shard `shard`'s counters (cluster-file order). Errors: INVALID_ARGUMENT (NULL cluster or out,
 * shard out of range). */
BLOCKPS_EXPORT blockps_result blockps_get_shard_counters(blockps_cluster* cluster, size_t shard,
                                                         blockps_shard_counters* out);

/* ---- Asynchronous transfers -------------------------------------------------------------------------- */
/* Start the transfer and return at once with *out a handle to it; its I/O errors come from blockps_op_wait.
 * The buffer must stay valid (and, for a push, unchanged) until the operation has finished (blockps_op_wait,
 * blockps_op_ready, the callback, or blockps_op_free, which waits). Sizes and ranges are checked before any
 * I/O as for the blocking calls. Errors (with *out NULL and nothing sent): INVALID_ARGUMENT (NULL cluster,
 * buffer or out, wrong size, blocks outside the model), NO_MEMORY. */
BLOCKPS_EXPORT blockps_result blockps_push_async(blockps_cluster* cluster, const void* grads, size_t bytes,
                                                 blockps_op** out);
BLOCKPS_EXPORT blockps_result blockps_pull_async(blockps_cluster* cluster, void* weights, size_t bytes,
                                                 blockps_op** out);
BLOCKPS_EXPORT blockps_result blockps_push_blocks_async(blockps_cluster* cluster, uint64_t first_block,
                                                        uint64_t block_count, const void* grads, size_t bytes,
                                                        blockps_op** out);
BLOCKPS_EXPORT blockps_result blockps_pull_blocks_async(blockps_cluster* cluster, uint64_t first_block,
                                                        uint64_t block_count, void* weights, size_t bytes,
                                                        blockps_op** out);

/* (API version 3) The exchange (blockps_exchange), asynchronous: both buffers stay valid until it finished. */
BLOCKPS_EXPORT blockps_result blockps_exchange_async(blockps_cluster* cluster, const void* grads, void* weights,
                                                     size_t bytes, blockps_op** out);
BLOCKPS_EXPORT blockps_result blockps_exchange_blocks_async(blockps_cluster* cluster, uint64_t first_block,
                                                            uint64_t block_count, const void* grads, void* weights,
                                                            size_t bytes, blockps_op** out);

/* (API version 8) Compressed blocks, for shards with compress= past their warm-up (docs/OPTIONS.md, "Compressed
 * blocks": each format's layout, ratio and accuracy cost). A block of n f32 elements compressed takes
 * blockps_compressed_block_bytes(format, n) bytes (a multiple of 512: its byte range on the LU starts with it). */
typedef enum blockps_compressed_format {
  BLOCKPS_COMPRESSED_SIGN1 = 0, /* 1 bit per element and an f32 scale per 256 elements */
  BLOCKPS_COMPRESSED_INT8 = 1   /* a byte per element and an f32 scale per 256 elements */
} blockps_compressed_format;

/* The calls below take a format (and a pull) as an int holding one of these values, as blockps_open_options holds its
 * shard kind: any other value is refused, not undefined. */

/* Bytes of a compressed block of `elements` f32 elements; 0 for 0 elements or an unknown format. */
BLOCKPS_EXPORT size_t blockps_compressed_block_bytes(int format, uint64_t elements);

/* Compresses `elements` f32 values of `x` plus `residual` (error feedback: `elements` floats, updated to what this
 * block left out, for the next step; NULL: none) into `out` (out_bytes = blockps_compressed_block_bytes). Errors
 * (nothing written): INVALID_ARGUMENT (NULL x or out, a wrong out_bytes, an unknown format, a NaN, an Inf or an
 * overflowing sum: the element named). */
BLOCKPS_EXPORT blockps_result blockps_compress(int format, const float* x, float* residual, size_t elements, void* out,
                                               size_t out_bytes);
/* Decodes a compressed block of `elements` elements (in_bytes = blockps_compressed_block_bytes) into `out`.
 * Errors (nothing written): INVALID_ARGUMENT (NULL buffers, a wrong in_bytes, a block that is not the format's:
 * a bad scale, a bit or padding byte that must be zero). */
BLOCKPS_EXPORT blockps_result blockps_decompress(int format, const void* in, size_t in_bytes, float* out,
                                                 size_t elements);

/* What a compressed exchange's READs bring back: an averaging shard's compressed average of the round (packed as
 * the push), or an optimizer shard's weights of the blocks in the wire dtype. */
typedef enum blockps_compressed_pull {
  BLOCKPS_PULL_COMPRESSED_AVERAGE = 0,
  BLOCKPS_PULL_WEIGHTS = 1
} blockps_compressed_pull;

/* Bytes blocks [first_block, first_block + block_count) take compressed, back to back (packed); 0 for a NULL
 * cluster, blocks outside the model or an unknown format. */
BLOCKPS_EXPORT uint64_t blockps_packed_bytes(const blockps_cluster* cluster, int format, uint64_t first_block,
                                             uint64_t block_count);

/* The compressed exchange: each block goes out as one WRITE of its compressed block (`packed_grads`, packed_bytes
 * long: the blocks' images back to back, compressed by the caller) and its READ follows (pipelined as
 * blockps_exchange_blocks), into `pulled` (pulled_bytes: packed_bytes for BLOCKPS_PULL_COMPRESSED_AVERAGE, the
 * blocks' wire bytes for BLOCKPS_PULL_WEIGHTS). Errors: as blockps_exchange_blocks; a shard whose round takes the
 * block in the other form (its warm-up) refuses it: BLOCKPS_ERR_IO naming ILLEGAL_REQUEST, nothing applied. */
BLOCKPS_EXPORT blockps_result blockps_exchange_compressed_blocks(blockps_cluster* cluster, uint64_t first_block,
                                                                 uint64_t block_count, int format, int pull,
                                                                 const void* packed_grads, size_t packed_bytes,
                                                                 void* pulled, size_t pulled_bytes);
BLOCKPS_EXPORT blockps_result blockps_exchange_compressed_blocks_async(blockps_cluster* cluster, uint64_t first_block,
                                                                       uint64_t block_count, int format, int pull,
                                                                       const void* packed_grads, size_t packed_bytes,
                                                                       void* pulled, size_t pulled_bytes,
                                                                       blockps_op** out);

/* Blocks until the operation has finished on every shard; its outcome (the first failure, or BLOCKPS_OK),
 * with the message in blockps_last_error. May be called again (same outcome) and from several threads.
 * Errors: INVALID_ARGUMENT (NULL op), and the transfer's errors as for the blocking calls. */
BLOCKPS_EXPORT blockps_result blockps_op_wait(blockps_op* op);

/* 1 when the operation has finished (blockps_op_wait would not block), 0 when it is still running, -1 for a
 * NULL op. Does not change blockps_last_error. */
BLOCKPS_EXPORT int blockps_op_ready(const blockps_op* op);

/* Called once when an operation has finished: its result, its message ("" when BLOCKPS_OK; valid during the
 * call only) and the `user` pointer given with it. It runs on one of the cluster's I/O threads, or on the
 * calling thread when the operation had already finished: keep it short and do not wait on another operation
 * of the same cluster in it (blockps_op_wait on this very operation returns at once). */
typedef void (*blockps_done_fn)(blockps_result result, const char* message, void* user);

/* Sets the operation's completion callback (at most one per operation). If the operation has already
 * finished, `on_done` runs now, on this thread, before this call returns.
 * Errors: INVALID_ARGUMENT (NULL op or on_done, a callback already set). */
BLOCKPS_EXPORT blockps_result blockps_op_on_done(blockps_op* op, blockps_done_fn on_done, void* user);

/* Frees the handle. If the operation is still running, waits for it first, so its buffer may be released once
 * this returns. A callback set on it still runs (before this returns). NULL: no-op. */
BLOCKPS_EXPORT void blockps_op_free(blockps_op* op);

/* ---- Double buffering and adaptive pull (API version 2) ------------------------------------------------ */
/* Two model buffers, each a weights + gradients pair: compute uses one while a communication thread pushes the
 * other's gradients and pulls fresh weights into it; blockps_double_buffer_step swaps them without a copy and
 * never hands compute a buffer whose pull has not completed on every shard. Adaptive pull sleeps a "bubble"
 * before each pull so the weights land just before compute ends (moving averages of compute, push and pull
 * time); where compute leaves no room for a bubble, push and pull are one pipelined exchange (blockps_exchange).
 * docs/OPTIONS.md ("Double buffering") explains every field. */

typedef struct blockps_double_buffer blockps_double_buffer;

typedef enum blockps_pipeline_mode {
  BLOCKPS_PIPELINE_SEQUENTIAL = 0,   /* one buffer: step pushes then pulls it, blocking (no overlap) */
  BLOCKPS_PIPELINE_DOUBLE_BUFFER = 1 /* two buffers, exchange overlapped with compute */
} blockps_pipeline_mode;

/* Fill with blockps_double_buffer_options_init, then change fields. */
typedef struct blockps_double_buffer_options {
  blockps_pipeline_mode mode; /* default BLOCKPS_PIPELINE_DOUBLE_BUFFER */
  int adaptive_pull;          /* 0/1, default 1 */
  int concurrent_push_pull;   /* ignored since API version 3 (kept for the ABI): where compute leaves no room
                                 for a bubble, push and pull are always one pipelined exchange over the one
                                 session per shard (blockps_exchange) */
  double smoothing;           /* weight of the newest sample in the moving averages, (0, 1], default 0.2 */
  double safety;              /* the pull aims to end this fraction of compute early, [0, 1), default 0.05 */
  int warmup_steps;           /* steps measured before the first bubble, >= 1, default 3 */
} blockps_double_buffer_options;

/* One step as compute saw it; times in seconds (StepMetrics in blockps/double_buffer.h). */
typedef struct blockps_step_metrics {
  uint64_t step;       /* 1 for the first step */
  double compute_s;    /* previous step's return (or open) to this call */
  double stall_s;      /* this call waiting for communication */
  double bubble_s;     /* sleep before the pull of the buffer handed back */
  double push_s;       /* its push latency */
  double pull_s;       /* its pull latency */
  double weight_age_s; /* its pull's completion to this call's return */
  int concurrent;      /* 1 when its push and pull were one pipelined exchange (blockps_exchange; push_s and
                          pull_s are then both its duration) */
} blockps_step_metrics;

/* The defaults. NULL: no-op. */
BLOCKPS_EXPORT void blockps_double_buffer_options_init(blockps_double_buffer_options* options);

/* Allocates the buffers (model_bytes each, 4 KiB aligned), pulls the current weights into them and starts the
 * communication thread. `options` NULL: the defaults. The cluster must stay open until the double buffer is
 * closed. Errors: INVALID_ARGUMENT (NULL cluster or out, an option out of range: the message names it),
 * IO, NO_MEMORY. */
BLOCKPS_EXPORT blockps_result blockps_double_buffer_open(blockps_cluster* cluster,
                                                         const blockps_double_buffer_options* options,
                                                         blockps_double_buffer** out);
/* The compute buffer's weights and gradients (model_bytes each, wire format), valid until the next step.
 * NULL for a NULL handle. */
BLOCKPS_EXPORT void* blockps_double_buffer_weights(blockps_double_buffer* db);
BLOCKPS_EXPORT void* blockps_double_buffer_grads(blockps_double_buffer* db);
/* Ends compute on the current buffer (its gradients are pushed as they are) and makes the other buffer the
 * compute buffer. `metrics` may be NULL. Errors: INVALID_ARGUMENT (NULL db), IO (a push or pull failed: the
 * double buffer is then failed and every later step returns the same error). */
BLOCKPS_EXPORT blockps_result blockps_double_buffer_step(blockps_double_buffer* db, blockps_step_metrics* metrics);
/* Waits for the exchange in flight, stops the thread, frees the buffers. NULL: no-op. */
BLOCKPS_EXPORT void blockps_double_buffer_close(blockps_double_buffer* db);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BLOCKPS_BLOCKPS_H */
