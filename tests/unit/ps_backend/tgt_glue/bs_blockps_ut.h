/* A stand-in for tgtd around the glue bs_blockps.c (compiled into bs_blockps_ut.c with tgt's functions stubbed):
 * the test plays tgt's main loop (submit, the wake fd's handler, aborts, sessions ending, LU close) and its I/O
 * pool, and reads back what the glue handed to tgt for each command. Main thread only. */
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
/* bs_cmd_submit: the store's return value (non-zero: tgt fails the command with HARDWARE ERROR itself). As tgt
 * does, a command the store took without making it asynchronous is completed GOOD at once. */
int ut_submit(struct ut_cmd* cmd);
/* tgt's scheduled events (tgt_add_sched_event), as its loop pass runs them; ut_wake and ut_lu_wake run them first
 * too. Returns how many ran. */
int ut_run_sched_events(void);
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
  int executed;    /* times the core executed it: in the pool, or on the main thread (main_thread_bytes) */
  int pool_runs;   /* times the pool ran its request function */
  int completed;   /* times target_cmd_io_done was called (exactly once is correct) */
  int ran_here;    /* completed by tgt at submission: the store ran it synchronously (main_thread_bytes) */
  int result;      /* the status given to target_cmd_io_done */
  int sense_built; /* sense_data_build(_with_info) was called */
  uint8_t sense_key;
  uint16_t asc;
  int sense_left; /* bytes of its own the glue left in the sense buffer (its admission record: it must take it out
                     before the answer; the stubbed sense_data_build writes none) */
};
struct ut_fate ut_cmd_fate(const struct ut_cmd* cmd);

/* ---- Several LUs at once and any command, as an initiator may send it (the command-path fuzzer,
 * tests/fuzz/fuzz_command.cpp). The calls above act on the one LU of ut_lu_init; these on the LU named. ---- */
struct ut_lu;
/* bs_init with `bsopts` on an LU of 2^blk_shift-byte blocks (register_bs_module first): the LU, or NULL when
 * refused (*init says how; init may be NULL). */
struct ut_lu* ut_lu_new(const char* bsopts, unsigned blk_shift, enum ut_init* init);
/* bs_open on `path`: 0 attached; otherwise tgt's bs_exit ran and `lu` is freed. */
int ut_lu_attach(struct ut_lu* lu, const char* path);
/* tgtadm's path update to the same path: bs_close, then bs_open, while commands may be in flight. The bs_open
 * result: non-zero leaves the LU without a path (tgt keeps it; its commands reach a detached store). */
int ut_lu_reopen(struct ut_lu* lu);
/* bs_close (when it has a path) then bs_exit, as tgt deletes an LU (tgt refuses while commands are in flight). */
void ut_lu_delete(struct ut_lu* lu);
/* tgt's event loop for `lu` alone: the handler of the fd it watches, if any. */
void ut_lu_wake(struct ut_lu* lu);
/* A command to `lu` from session `itn_id` with the CDB `cdb` (cdb_len 1..16 bytes, the rest zero), with offset
 * and transfer length set from it as tgt's sbc.c sets them (READ/WRITE/ORWRITE/WRITE SAME: LBA and blocks; VERIFY:
 * the LBA; anything else 0) but without tgt's range checks, and a data buffer of `data_length` bytes copied from
 * `data` (NULL: zeros): data-out (`data_out`) or data-in. As tgt does, a WRITE's data-out is cut to the transfer
 * length. `reuse`: a command tgt has completed (or refused), whose memory the new one takes, as tgt's allocator may
 * give it; NULL for a new allocation. */
struct ut_cmd* ut_cmd_new_cdb(struct ut_lu* lu, uint64_t itn_id, const uint8_t* cdb, size_t cdb_len,
                              const uint8_t* data, uint32_t data_length, int data_out, struct ut_cmd* reuse);
/* The command's data buffer (what a READ returned). */
const uint8_t* ut_cmd_data(const struct ut_cmd* cmd);
/* tgt's I/O pool, one command: runs the `index`-th queued one (counted from the oldest) as ut_run_pool does, so
 * the threads' order can differ from the queue's. 0 when there is no such command, else 1. */
int ut_run_pool_one(size_t index);
/* How many commands wait in tgt's I/O pool. */
size_t ut_pool_queued(void);
/* A fresh tgtd: no session ended, no log line. */
void ut_reset(void);

/* How many tgtd log lines (eprintf, from any thread) so far contain `needle`. */
int ut_log_count(const char* needle);
/* The latest such line, cut to `size` bytes. */
void ut_log_last(char* line, size_t size);

#ifdef __cplusplus
}
#endif

#endif
