/* A stand-in for tgtd around the glue bs_blockps.c (compiled into bs_blockps_ut.c with tgt's functions stubbed):
 * the test plays tgt's main loop (submit, the wake fd's handler, aborts, sessions ending, LU close) and its I/O
 * pool, and reads back what the glue handed to tgt for each command. One LU at a time; main thread only. */
#ifndef BLOCKPS_BS_BLOCKPS_UT_H
#define BLOCKPS_BS_BLOCKPS_UT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What bs_init told tgtadm. */
enum ut_init { UT_INIT_OK, UT_INIT_UNKNOWN_PARAM, UT_INIT_INVALID_REQUEST, UT_INIT_OTHER };
/* register_bs_module, then bs_init with `bsopts` on a 512-byte-block LU. */
enum ut_init ut_lu_init(const char* bsopts);
/* bs_open on `path`: the store's return value (0: attached). */
int ut_lu_open(const char* path);
/* bs_close then bs_exit, as tgt deletes an LU. */
void ut_lu_close(void);
/* Whether the glue watches an fd on tgt's event loop now (tgt_event_add without tgt_event_del). */
int ut_wake_fd_watched(void);
/* What tgt's event loop does when the watched fd is readable: call its handler. */
void ut_wake(void);

struct ut_cmd;
/* A READ(10) or WRITE(10) (`is_write`) of `length` bytes at byte `offset` from session `itn_id` (its IQN is
 * "iqn.2024-01.test:worker-<itn_id>"), with a zeroed data buffer. */
struct ut_cmd* ut_cmd_new(uint64_t itn_id, int is_write, uint64_t offset, uint32_t length);
void ut_cmd_free(struct ut_cmd* cmd);
/* bs_cmd_submit: the store's return value (non-zero: tgt fails the command with HARDWARE ERROR itself). */
int ut_submit(struct ut_cmd* cmd);
/* An ABORT TASK / LUN RESET now waits on the command (tgt sets cmd->mreq). */
void ut_abort(struct ut_cmd* cmd);
/* The session `itn_id` is gone: it_nexus_lookup finds it no more. */
void ut_end_session(uint64_t itn_id);
/* tgt's I/O pool: runs the request function on every queued command, then completes it as tgt does
 * (target_cmd_io_done with the result it set). Returns how many ran. */
int ut_run_pool(void);

/* What the glue handed to tgt for one command. */
struct ut_fate {
  int async;       /* set_cmd_async: the store owns the command */
  int queued;      /* times handed to the I/O pool (bs_thread_cmd_submit), including resubmits */
  int executed;    /* times the pool ran its request function */
  int completed;   /* times target_cmd_io_done was called (exactly once is correct) */
  int result;      /* the status given to target_cmd_io_done */
  int sense_built; /* sense_data_build(_with_info) was called */
  uint8_t sense_key;
  uint16_t asc;
};
struct ut_fate ut_cmd_fate(const struct ut_cmd* cmd);

/* How many tgtd log lines (eprintf, from any thread) so far contain `needle`. */
int ut_log_count(const char* needle);
/* The latest such line, cut to `size` bytes. */
void ut_log_last(char* line, size_t size);

#ifdef __cplusplus
}
#endif

#endif
