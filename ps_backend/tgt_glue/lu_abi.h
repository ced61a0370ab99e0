/* The C interface between the tgt glue (bs_blockps.c and bs_blockps_module.c, the only files that include tgt's
 * headers) and the C++ PS core behind it (docs/ARCHITECTURE.md, "The C boundary").
 *
 * One convention: every call that can fail returns an `enum blockps_result` (BLOCKPS_OK = 0) and, when it is not
 * BLOCKPS_OK, writes the reason as one NUL-terminated line into the caller's `message` buffer (cut to
 * `message_size` bytes; `message` may be NULL). The caller logs that line. Calls that cannot fail return their
 * value directly and say so. No call throws, aborts or waits for a worker; only attach and detach touch the disk
 * (the shard's checkpoint file), and the last detach of a shard stops its threads. Nothing fails open: a command whose
 * admission or execution fails is refused, never run unchecked. */
#ifndef BLOCKPS_LU_ABI_H
#define BLOCKPS_LU_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Changes whenever a call's signature or the meaning of a code changes. */
#define BLOCKPS_LU_ABI_VERSION 6

/* A `message` buffer of this size holds every message whole. */
#define BLOCKPS_MESSAGE_BYTES 1024

/* An initiator's name as an admission keeps it, with its NUL: iSCSI's longest (RFC 3720 3.2.6.1: 223 bytes). A
 * longer name is cut there, for every command of its session alike. */
#define BLOCKPS_INITIATOR_NAME_BYTES 224

enum blockps_result {
  BLOCKPS_OK = 0,
  BLOCKPS_INVALID_ARGUMENT = 1, /* a required pointer is NULL or a size is 0: a bug in the caller */
  BLOCKPS_UNKNOWN_OPTION = 2,   /* bsopts names a key blockps does not have */
  BLOCKPS_BAD_OPTION = 3,       /* bsopts is malformed or a value is not allowed */
  BLOCKPS_SHARD_REFUSED = 4,    /* the shard cannot be served as asked (checkpoint file, sizes) */
  BLOCKPS_SYSTEM_ERROR = 5,     /* the operating system refused a resource */
  BLOCKPS_NOT_ATTACHED = 6,     /* the LU has no shard (a command reached it before attach or after detach) */
  BLOCKPS_INTERNAL_ERROR = 7    /* the core failed unexpectedly (an exception, out of memory) */
};

struct blockps_lu;

/* Route the core's own log lines (one line each, no newline) to the host daemon's log; NULL: stderr.
 * Cannot fail. */
void blockps_set_log(void (*sink)(const char* line));

/* bs_init: parse and check --bsopts (may be NULL) for an LU of `lu_block_bytes` bytes per block, and set `*lu`
 * to the new LU (NULL on failure).
 * Codes: OK; INVALID_ARGUMENT (lu NULL, lu_block_bytes 0); UNKNOWN_OPTION; BAD_OPTION; INTERNAL_ERROR. */
enum blockps_result blockps_lu_configure(const char* bsopts, uint32_t lu_block_bytes, struct blockps_lu** lu,
                                         char* message, size_t message_size);

/* bs_open: attach the LU to the shard of `path` (its checkpoint file), creating or loading it, and set
 * `*capacity` to the LU's size in bytes. On failure the LU stays detached (no wake fd).
 * Codes: OK; INVALID_ARGUMENT (lu, path or capacity NULL); SHARD_REFUSED; SYSTEM_ERROR (no eventfd);
 * INTERNAL_ERROR. */
enum blockps_result blockps_lu_attach(struct blockps_lu* lu, const char* path, uint64_t* capacity, char* message,
                                      size_t message_size);

/* bs_close: detach from the shard (the last LU of a shard writes a final checkpoint). The LU is detached even
 * when this fails. Codes: OK (also when not attached); INVALID_ARGUMENT (lu NULL); INTERNAL_ERROR. */
enum blockps_result blockps_lu_detach(struct blockps_lu* lu, char* message, size_t message_size);

/* bs_exit: free (NULL is fine). Cannot fail. */
void blockps_lu_free(struct blockps_lu* lu);

/* Threads for tgt's I/O pool of this LU (bsopts io_threads; 1 for NULL). Cannot fail. */
uint32_t blockps_lu_io_threads(const struct blockps_lu* lu);

/* The INQUIRY product id for this LU's role ("BLOCKPS-GRAD" ...), so hosts can tell the LUs apart. Cannot
 * fail. */
const char* blockps_lu_product_id(const struct blockps_lu* lu);

/* The eventfd of parked commands, owned by the core (made at attach, closed at detach): the glue watches it on its
 * main loop (tgt_event_add) while the LU is attached, or -1 when this LU never parks commands. Readable when
 * parked commands may go on (or are refused), and periodically while workers are known. Cannot fail. */
int blockps_lu_wake_fd(const struct blockps_lu* lu);

/* A command as tgt hands it to a store. */
struct blockps_command {
  const void* handle; /* the glue's command (struct scsi_cmd *), as given to blockps_lu_admit */
  const uint8_t* cdb;
  uint64_t offset;          /* bytes (LBA << block shift) */
  uint32_t transfer_length; /* bytes */
  uint8_t* in;              /* READ data buffer, in_length bytes */
  uint32_t in_length;
  const uint8_t* out; /* WRITE data, out_length bytes (may be NULL) */
  uint32_t out_length;
};

/* Who sent a command: one I_T nexus (tid + itn_id locate it in tgt; iqn names it). */
struct blockps_worker {
  int tid;
  uint64_t itn_id;
  const char* iqn;
};

/* A command's SCSI result. */
struct blockps_outcome {
  uint8_t status; /* SAM status: 0x00 GOOD, 0x02 CHECK CONDITION (with the sense below), 0x18 RESERVATION CONFLICT
                     (no sense: another job holds the shard) */
  uint8_t sense_key;
  uint16_t asc; /* ASC << 8 | ASCQ */
  int has_info;
  uint64_t info;
};

/* What the core asks of the glue, on the main thread only, inside blockps_lu_admit, blockps_lu_on_wake and
 * blockps_lu_fail_parked: the glue's one table of calls into tgt. */
struct blockps_glue_ops {
  /* Who sent `handle`: sets *worker; the name may be written into `name` (`size` bytes). Asked only for the
   * commands an admission concerns. */
  void (*sender)(const void* handle, struct blockps_worker* worker, char* name, size_t size);
  int (*alive)(int tid, uint64_t itn_id);                                  /* the session still exists */
  int (*aborted)(const void* handle);                                      /* an ABORT TASK / LUN RESET waits */
  /* Run it now (`how`: BLOCKPS_ADMIT_RUN, queued to the I/O threads; BLOCKPS_ADMIT_RUN_HERE, executed on this
   * thread with blockps_lu_execute and completed). */
  void (*resubmit)(const void* handle, int how);
  void (*fail)(const void* handle, const struct blockps_outcome* outcome); /* complete it with this result */
};

/* Where a command goes once it is admitted. */
enum blockps_admission {
  BLOCKPS_ADMIT_RUN = 0,    /* queue it to the I/O threads */
  BLOCKPS_ADMIT_PARKED = 1, /* the core holds it (set_cmd_async): it comes back through blockps_lu_on_wake, to be
                               resubmitted or failed (a refusal, e.g. too few live workers, comes back that way) */
  BLOCKPS_ADMIT_RUN_HERE = 2 /* execute it now on this thread (blockps_lu_execute): a READ or WRITE small enough
                                (bsopts main_thread_bytes) that the hand-off to the I/O threads costs more than its
                                work. A GOOD outcome completes it synchronously; any other only asynchronously (a
                                store sets a status of its own no other way), on tgt's next loop pass */
};

/* What blockps_lu_admit decided for one command. The glue acts on `how`, keeps the whole record with the command
 * from admission until it executes (across a park too) and hands it to blockps_lu_execute; the other fields are the
 * core's (its verdict, ps_backend/shard/admission_gate.h, and the sender whose name a control write's lines act in)
 * and the glue does not read them. Plain bytes: the glue may keep it anywhere that holds sizeof bytes. */
struct blockps_admitted {
  enum blockps_admission how;
  uint8_t admitted; /* 1: an admission concerned the command and decided it; 0: none did (or the LU was detached) */
  uint8_t verdict;
  int32_t sender_tid;
  uint64_t sender_itn;
  char sender_iqn[BLOCKPS_INITIATOR_NAME_BYTES];
};

/* Main thread, for every command before it is queued: the one admission question. Only the commands a job's claim
 * fences (a grad-LU READ or WRITE, a command that changes a weights LU's weights), that may wait for a round (a
 * grad-LU READ or WRITE of a shard with rounds) or that carry control lines (a status-LU WRITE; a status-LU READ
 * lets the claim forget gone sessions) concern it: for them the core learns the sender (ops->sender) and asks the
 * LU's admission gate; every other command is RUN at once, from the LU's options alone. A READ/WRITE of a
 * mode=sync/ssp grad LU may be PARKED, also when the gate refuses it (another job holds the shard; too few workers),
 * to be failed from blockps_lu_on_wake. Everything else runs, RUN or RUN_HERE (a READ or WRITE of at most
 * main_thread_bytes of a grad or weights LU, ServedLu::runs_on_caller): execution answers what the admission
 * decided, from the record it is given (RESERVATION CONFLICT for a command of a session outside the job that holds
 * the shard; ACCESS DENIED for a control write of a non-administrator on a status LU with admins=). `cmd` needs
 * handle and cdb, offset and transfer_length; its data buffers are not read. A parked command comes back through
 * ops->resubmit the same way, RUN or RUN_HERE, and executes with the record of its admission.
 * Sets *admitted whatever the code (on any code but OK: RUN, not admitted). Codes: OK (admitted->how says what to
 * do); INVALID_ARGUMENT (lu, cmd, its cdb, ops or admitted NULL); INTERNAL_ERROR. On any code but OK nothing was
 * parked and the glue must refuse the command (it fails it synchronously: tgt answers CHECK CONDITION, HARDWARE
 * ERROR, INTERNAL TARGET FAILURE). */
enum blockps_result blockps_lu_admit(struct blockps_lu* lu, const struct blockps_command* cmd,
                                     const struct blockps_glue_ops* ops, struct blockps_admitted* admitted,
                                     char* message, size_t message_size);

/* The wake fd's handler (main thread): drains it, drops workers whose session is gone, and hands back every
 * parked command that may go on (resubmit), is refused, aborted (ABORTED COMMAND) or past its deadline (NOT
 * READY, MANUAL INTERVENTION REQUIRED) (fail). Each failed command gets one log line from the core.
 * Codes: OK (also for an LU that never parks); INVALID_ARGUMENT (lu or ops NULL); INTERNAL_ERROR (commands not
 * handed back yet stay parked until the next wake). A command refused because another job holds the shard fails
 * with RESERVATION CONFLICT (no sense). */
enum blockps_result blockps_lu_on_wake(struct blockps_lu* lu, const struct blockps_glue_ops* ops, char* message,
                                       size_t message_size);

/* bs_close (main thread, before the LU detaches): fail every command still parked on it (NOT READY). tgt may
 * close an LU without waiting for the commands a store holds; held ones would pin their sessions forever.
 * Codes: as blockps_lu_on_wake. */
enum blockps_result blockps_lu_fail_parked(struct blockps_lu* lu, const struct blockps_glue_ops* ops, char* message,
                                           size_t message_size);

/* Execute one command (tgt's I/O threads, several at once; or the main thread, RUN_HERE) with the record its
 * blockps_lu_admit set (`admitted`; NULL: never admitted, as a record that says so) and set `*outcome` to its SCSI
 * result. A command an admission concerns that was never admitted has no known sender: a control write is refused
 * (ACCESS DENIED) on a status LU with admins=.
 * Codes: OK (*outcome is what the command means: GOOD, or the CHECK CONDITION the core chose, e.g. a refused
 * control line); INVALID_ARGUMENT (lu, cmd or its cdb NULL; a record no admission wrote); NOT_ATTACHED;
 * INTERNAL_ERROR. With any code but OK (and a non-NULL outcome) *outcome is CHECK CONDITION, HARDWARE ERROR, INTERNAL
 * TARGET FAILURE. */
enum blockps_result blockps_lu_execute(struct blockps_lu* lu, const struct blockps_command* cmd,
                                       const struct blockps_admitted* admitted, struct blockps_outcome* outcome,
                                       char* message, size_t message_size);

#ifdef __cplusplus
}
#endif

#endif
