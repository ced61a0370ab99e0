/* The C interface between the tgt glue (bs_blockps.c, the only file that includes tgt's headers) and the C++
 * PS core. Every call is safe to make with bad input: errors come back as text, nothing throws or aborts. */
#ifndef BLOCKPS_LU_ABI_H
#define BLOCKPS_LU_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct blockps_lu;

/* Route the core's log lines (one line each, no newline) to the host daemon's log. */
void blockps_set_log(void (*sink)(const char *line));

/* bs_init: parse and check --bsopts (may be NULL). Returns NULL and writes the reason into `error` on failure. */
struct blockps_lu *blockps_lu_configure(const char *bsopts, uint32_t lu_block_bytes, char *error, size_t error_size);

/* bs_open: attach the LU to the shard of `path` (its checkpoint file), creating or loading it. Returns 0 and the
 * LU's capacity in bytes, or -1 and the reason. */
int blockps_lu_attach(struct blockps_lu *lu, const char *path, uint64_t *capacity, char *error, size_t error_size);

/* bs_close: detach from the shard (the last LU of a shard writes a final checkpoint). */
void blockps_lu_detach(struct blockps_lu *lu);

/* bs_exit: free. */
void blockps_lu_free(struct blockps_lu *lu);

/* Threads for tgt's I/O pool of this LU (bsopts io_threads). */
uint32_t blockps_lu_io_threads(const struct blockps_lu *lu);

/* The INQUIRY product id for this LU's role ("BLOCKPS-GRAD" ...), so hosts can tell the LUs apart. */
const char *blockps_lu_product_id(const struct blockps_lu *lu);

struct blockps_command {
  const void *handle;       /* the glue's command (struct scsi_cmd *), as given to blockps_lu_admit */
  const uint8_t *cdb;
  uint64_t offset;          /* bytes (LBA << block shift) */
  uint32_t transfer_length; /* bytes */
  uint8_t *in;              /* READ data buffer, in_length bytes */
  uint32_t in_length;
  const uint8_t *out;       /* WRITE data, out_length bytes (may be NULL) */
  uint32_t out_length;
};

struct blockps_outcome {
  uint8_t status;    /* SAM status: 0 GOOD, 2 CHECK CONDITION */
  uint8_t sense_key;
  uint16_t asc;      /* ASC << 8 | ASCQ */
  int has_info;
  uint64_t info;
};

/* Who sent a command: one I_T nexus (tid + itn_id locate it in tgt; iqn names it). */
struct blockps_worker {
  int tid;
  uint64_t itn_id;
  const char *iqn;
};

enum blockps_admission {
  BLOCKPS_ADMIT_RUN = 0,   /* queue it to the I/O threads */
  BLOCKPS_ADMIT_PARKED = 1 /* the core holds it (set_cmd_async): it comes back through blockps_lu_on_wake, to be
                              resubmitted or failed (a refusal, e.g. too few live workers, comes back that way) */
};

/* Main thread, before a command is queued to the I/O threads, for a command blockps_lu_needs_admission named: a
 * READ/WRITE of a mode=sync grad LU may park; a WRITE of a status LU with admins= has its sender checked (RUN; the
 * I/O thread then refuses it unless the sender is an administrator). RUN at once for anything else. */
enum blockps_admission blockps_lu_admit(struct blockps_lu *lu, const void *handle, const uint8_t *cdb, uint64_t offset,
                                        uint32_t length, const struct blockps_worker *worker);

/* An eventfd the glue watches on its main loop (tgt_event_add) while the LU is attached, or -1 when this LU
 * never parks commands. Readable when parked commands may go on, and periodically while workers are known. */
int blockps_lu_wake_fd(const struct blockps_lu *lu);

/* What the glue does for parked commands; every call on the main thread. */
struct blockps_parked_ops {
  int (*alive)(int tid, uint64_t itn_id);  /* the session still exists */
  int (*aborted)(const void *handle);      /* an ABORT TASK / LUN RESET waits on it */
  void (*resubmit)(const void *handle);    /* queue it to the I/O threads now */
  void (*fail)(const void *handle, const struct blockps_outcome *outcome); /* complete it with this result */
};

/* The wake fd's handler: drains it, drops workers whose session is gone, and hands parked commands back. */
void blockps_lu_on_wake(struct blockps_lu *lu, const struct blockps_parked_ops *ops);

/* bs_close (main thread, before the LU detaches): fail every command still parked on it (NOT READY). tgt may
 * close an LU without waiting for the commands a store holds; held ones would pin their sessions forever. */
void blockps_lu_fail_parked(struct blockps_lu *lu, const struct blockps_parked_ops *ops);

/* Whether a command with this CDB needs blockps_lu_admit and its sender's identity: a READ or WRITE of a
 * mode=sync/ssp grad LU (it may have to wait), or a WRITE of a status LU with admins= (a control line, accepted
 * only from an administrator). */
int blockps_lu_needs_admission(const struct blockps_lu *lu, const uint8_t *cdb);

/* Execute one command (called from tgt's I/O threads, several at once). */
void blockps_lu_execute(struct blockps_lu *lu, const struct blockps_command *cmd, struct blockps_outcome *outcome);

#ifdef __cplusplus
}
#endif

#endif
