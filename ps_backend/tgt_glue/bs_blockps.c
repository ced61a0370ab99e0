/*
 * tgt glue for blockps: with bs_blockps_module.c, the only files that include tgt's headers. It makes the backing
 * store `--bstype blockps` (blockps_register_backing_store, which tgtd's entry point in bs_blockps_module.c
 * calls), turns tgt's LU life cycle and commands into calls of the C++ core (lu_abi.h), and sets the SCSI result
 * the core chose. Like tgt's own stores (bs_rdwr.c), one function answers a command on tgt's per-LU I/O thread
 * pool (bs_thread), so tgtd's main thread never does the math; before that, on the main thread, the core is asked
 * once what becomes of it (run; run here, on the main thread, a READ or WRITE too small to be worth the pool's
 * hand-off; or held with tgt's asynchronous completion, never by blocking a pool thread, until the core's eventfd
 * says it may go on or fails). The core decides; the glue only translates types and threads.
 * Unit-tested without tgtd by tests/unit/ps_backend/tgt_glue/bs_blockps_ut.c, which includes this file.
 */
#include <sys/epoll.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tgt's list.h takes offsetof through a null pointer unless the compiler's is named (as the Linux kernel it comes
 * from does): UndefinedBehaviorSanitizer reports the former in list_for_each_entry. */
#define __compiler_offsetof(TYPE, MEMBER) __builtin_offsetof(TYPE, MEMBER)
#include "list.h"
#include "util.h"
#include "tgtd.h"
#include "scsi.h"
#include "spc.h"
#include "bs_thread.h"
#include "driver.h"
#include "target.h"

#include "ps_backend/tgt_glue/bs_blockps.h"
#include "ps_backend/tgt_glue/lu_abi.h"

/* Private LU data: tgt's thread-pool state must come first (BS_THREAD_I assumes it). The wake fd is the core's
 * (blockps_lu_wake_fd). Commands run here at submission whose outcome is not GOOD wait on `answer_later` (linked
 * by bs_list) for `answer_event`, tgt's next loop pass: a store completes a command with a status of its own only
 * asynchronously. */
struct blockps_lu_private {
	struct bs_thread_info thread_info;
	struct blockps_lu *core;
	struct list_head answer_later;
	struct event_data answer_event;
};

static struct blockps_lu_private *lu_private(struct scsi_lu *lu)
{
	return (struct blockps_lu_private *)BS_THREAD_I(lu);
}

static void log_to_tgtd(const char *line)
{
	eprintf("%s\n", line);
}

/* Sets the SCSI result the core chose; tgt completes the command afterwards (or the caller does). Only CHECK
 * CONDITION carries sense data (RESERVATION CONFLICT has none). */
static void set_outcome(struct scsi_cmd *cmd, const struct blockps_outcome *o)
{
	scsi_set_result(cmd, o->status);
	if (o->status != SAM_STAT_CHECK_CONDITION)
		return;
	if (o->has_info)
		sense_data_build_with_info(cmd, o->sense_key, o->asc, o->info);
	else
		sense_data_build(cmd, o->sense_key, o->asc);
}

/* Whether a core call succeeded; one log line saying why not when it did not (any thread: eprintf is the one tgt
 * call that may run off the main thread). */
static int check_core(const struct scsi_lu *lu, enum blockps_result r, const char *message)
{
	if (r == BLOCKPS_OK)
		return 1;
	eprintf("blockps: LU %" PRIu64 ": %s\n", lu->lun, message);
	return 0;
}

/* What the core's admission decided for a command (struct blockps_admitted) stays with the command until it executes,
 * across a park too: in the command's own sense buffer. tgt gives a store no other field of a command to keep data in
 * (bs_list holds it in tgt's I/O pool queue), and nothing in tgt reads the sense buffer while the store holds the
 * command: its sense_len stays 0 until the store builds sense data (sense_data_build) after execution, and a GOOD
 * answer sends no sense at all. The record is taken out (and the bytes cleared) before the answer is set. */
_Static_assert(sizeof(struct blockps_admitted) <= sizeof(((struct scsi_cmd *)0)->sense_buffer),
	       "a command's admission record must fit its sense buffer");

static void keep_admitted(struct scsi_cmd *cmd, const struct blockps_admitted *admitted)
{
	memcpy(cmd->sense_buffer, admitted, sizeof(*admitted));
}

static void take_admitted(struct scsi_cmd *cmd, struct blockps_admitted *admitted)
{
	memcpy(admitted, cmd->sense_buffer, sizeof(*admitted));
	memset(cmd->sense_buffer, 0, sizeof(*admitted));
}

/* tgt's command as the core takes it. */
static struct blockps_command core_command(struct scsi_cmd *cmd)
{
	struct blockps_command c;

	c.handle = cmd;
	c.cdb = cmd->scb;
	c.offset = cmd->offset;
	c.transfer_length = cmd->tl;
	c.in = scsi_get_in_buffer(cmd);
	c.in_length = scsi_get_in_length(cmd);
	c.out = scsi_get_out_buffer(cmd);
	c.out_length = scsi_get_out_length(cmd);
	return c;
}

/* The request function of the I/O threads: the core executes the command with what its admission decided and chooses
 * its result. */
static void blockps_request(struct scsi_cmd *cmd)
{
	struct blockps_command c = core_command(cmd);
	struct blockps_admitted admitted;
	struct blockps_outcome o;
	char message[BLOCKPS_MESSAGE_BYTES];

	take_admitted(cmd, &admitted);
	/* On failure the outcome is already HARDWARE ERROR, INTERNAL TARGET FAILURE: only the reason is left to log. */
	check_core(cmd->dev, blockps_lu_execute(lu_private(cmd->dev)->core, &c, &admitted, &o, message, sizeof(message)),
		   message);
	set_outcome(cmd, &o);
}

/* The session's initiator name: tgt's transport id puts it, NUL-terminated, at byte 4 (main thread only). A
 * transport id longer than `size` is not written at all (tgt returns the length it needs), so the buffer is
 * cleared first and that length checked. */
static const char *initiator_name(struct scsi_cmd *cmd, char *buf, int size)
{
	struct tgt_driver *driver = tgt_drivers[cmd->c_target->lid];
	int len;

	buf[4] = '\0';
	if (!driver->transportid)
		return "(unknown initiator)";
	len = driver->transportid(cmd->c_target->tid, cmd->cmd_itn_id, buf, size);
	if (len <= 0 || len > size || buf[4] == '\0')
		return "(unknown initiator)";
	buf[size - 1] = '\0';
	return buf + 4;
}

static int parked_session_alive(int tid, uint64_t itn_id)
{
	return it_nexus_lookup(tid, itn_id) != NULL;
}

static int parked_aborted(const void *handle)
{
	return ((const struct scsi_cmd *)handle)->mreq != NULL;
}

/* A parked command that may go on: to the pool, or executed here and completed (it is asynchronous already). */
static void parked_resubmit(const void *handle, int how)
{
	struct scsi_cmd *cmd = (struct scsi_cmd *)handle;

	if (how != BLOCKPS_ADMIT_RUN_HERE) {
		bs_thread_cmd_submit(cmd);
		return;
	}
	blockps_request(cmd);
	target_cmd_io_done(cmd, scsi_get_result(cmd));
}

static void parked_fail(const void *handle, const struct blockps_outcome *o)
{
	struct scsi_cmd *cmd = (struct scsi_cmd *)handle;
	struct blockps_admitted admitted;

	take_admitted(cmd, &admitted); /* it never executes */
	set_outcome(cmd, o);
	target_cmd_io_done(cmd, o->status);
}

static void command_sender(const void *handle, struct blockps_worker *worker, char *name, size_t size)
{
	struct scsi_cmd *cmd = (struct scsi_cmd *)handle;

	worker->tid = cmd->c_target->tid;
	worker->itn_id = cmd->cmd_itn_id;
	worker->iqn = initiator_name(cmd, name, (int)size);
}

/* What the core asks of tgt, on the main thread. */
static const struct blockps_glue_ops glue_ops = {
	.sender = command_sender,
	.alive = parked_session_alive,
	.aborted = parked_aborted,
	.resubmit = parked_resubmit,
	.fail = parked_fail,
};

/* tgt's loop pass after a submission that ran commands here: answer those whose outcome is not GOOD. */
static void answer_later(struct event_data *ev)
{
	struct blockps_lu_private *priv = ev->data;
	struct scsi_cmd *cmd, *next;

	list_for_each_entry_safe(cmd, next, &priv->answer_later, bs_list) {
		list_del_init(&cmd->bs_list);
		target_cmd_io_done(cmd, scsi_get_result(cmd));
	}
}

/* Executes a command on the main thread at submission. GOOD: tgt completes it when this returns 0. Anything else
 * waits for answer_later: sbc.c turns a synchronous store's result into GOOD or HARDWARE ERROR only. */
static int run_here(struct scsi_cmd *cmd)
{
	struct blockps_lu_private *priv = lu_private(cmd->dev);

	blockps_request(cmd);
	if (scsi_get_result(cmd) == SAM_STAT_GOOD)
		return 0;
	set_cmd_async(cmd);
	list_add_tail(&cmd->bs_list, &priv->answer_later);
	tgt_add_sched_event(&priv->answer_event);
	return 0;
}

/* Main thread, before a command is queued: the core says whether it runs now (in the pool or here) or waits
 * (parked), and the command keeps what it decided until it executes. */
static int blockps_cmd_submit(struct scsi_cmd *cmd)
{
	struct blockps_command c = core_command(cmd);
	struct blockps_admitted admitted;
	char message[BLOCKPS_MESSAGE_BYTES];
	char name[512];

	if (blockps_lu_admit(lu_private(cmd->dev)->core, &c, &glue_ops, &admitted, message, sizeof(message)) !=
	    BLOCKPS_OK) {
		/* Refused, never run unchecked: tgt answers HARDWARE ERROR, INTERNAL TARGET FAILURE. */
		eprintf("blockps: LU %" PRIu64 ": refused command 0x%02x of %s: %s\n", cmd->dev->lun, cmd->scb[0],
			initiator_name(cmd, name, sizeof(name)), message);
		return -1;
	}
	keep_admitted(cmd, &admitted);
	switch (admitted.how) {
	case BLOCKPS_ADMIT_PARKED:
		set_cmd_async(cmd);
		return 0;
	case BLOCKPS_ADMIT_RUN_HERE:
		return run_here(cmd);
	case BLOCKPS_ADMIT_RUN:
		break;
	}
	return bs_thread_cmd_submit(cmd);
}

static void blockps_wake(int fd, int events, void *data)
{
	struct scsi_lu *lu = data;
	char message[BLOCKPS_MESSAGE_BYTES];

	check_core(lu, blockps_lu_on_wake(lu_private(lu)->core, &glue_ops, message, sizeof(message)), message);
}

static tgtadm_err bs_blockps_init(struct scsi_lu *lu, char *bsopts)
{
	struct blockps_lu_private *priv = lu_private(lu);
	char message[BLOCKPS_MESSAGE_BYTES];
	enum blockps_result r;
	tgtadm_err ret;

	r = blockps_lu_configure(bsopts, 1U << lu->blk_shift, &priv->core, message, sizeof(message));
	if (r != BLOCKPS_OK) {
		eprintf("blockps: refused LU %" PRIu64 ": %s\n", lu->lun, message);
		return r == BLOCKPS_UNKNOWN_OPTION ? TGTADM_UNKNOWN_PARAM : TGTADM_INVALID_REQUEST;
	}
	INIT_LIST_HEAD(&priv->answer_later);
	tgt_init_sched_event(&priv->answer_event, answer_later, priv);
	ret = bs_thread_open(&priv->thread_info, blockps_request, (int)blockps_lu_io_threads(priv->core));
	if (ret != TGTADM_SUCCESS) {
		/* tgt does not call bs_exit when bs_init fails: clean up here. */
		blockps_lu_free(priv->core);
		priv->core = NULL;
	}
	return ret;
}

static int bs_blockps_open(struct scsi_lu *lu, char *path, int *fd, uint64_t *size)
{
	struct blockps_lu_private *priv = lu_private(lu);
	char message[BLOCKPS_MESSAGE_BYTES];
	int wake_fd;

	*fd = -1; /* no file descriptor: the shard lives in memory, the path is its checkpoint file */
	if (blockps_lu_attach(priv->core, path, size, message, sizeof(message)) != BLOCKPS_OK) {
		eprintf("blockps: refused LU %" PRIu64 " on %s: %s\n", lu->lun, path, message);
		return -1;
	}
	wake_fd = blockps_lu_wake_fd(priv->core);
	if (wake_fd >= 0 && tgt_event_add(wake_fd, EPOLLIN, blockps_wake, lu) != 0) {
		eprintf("blockps: refused LU %" PRIu64 " on %s: cannot watch its eventfd\n", lu->lun, path);
		check_core(lu, blockps_lu_detach(priv->core, message, sizeof(message)), message);
		return -1;
	}
	snprintf(lu->attrs.vendor_id, sizeof(lu->attrs.vendor_id), "%s", "BLOCKPS");
	snprintf(lu->attrs.product_id, sizeof(lu->attrs.product_id), "%s", blockps_lu_product_id(priv->core));
	return 0;
}

static void bs_blockps_close(struct scsi_lu *lu)
{
	struct blockps_lu_private *priv = lu_private(lu);
	char message[BLOCKPS_MESSAGE_BYTES];
	/* Attached (bs_open succeeded): the core's fd is the one bs_open watches, until the detach below closes it. */
	int wake_fd = blockps_lu_wake_fd(priv->core);

	if (wake_fd >= 0) {
		check_core(lu, blockps_lu_fail_parked(priv->core, &glue_ops, message, sizeof(message)), message);
		tgt_event_del(wake_fd);
	}
	check_core(lu, blockps_lu_detach(priv->core, message, sizeof(message)), message);
}

static void bs_blockps_exit(struct scsi_lu *lu)
{
	struct blockps_lu_private *priv = lu_private(lu);

	/* Nothing waits on it: tgt deletes an LU only when no command is in flight. */
	tgt_remove_sched_event(&priv->answer_event);
	bs_thread_close(&priv->thread_info);
	blockps_lu_free(priv->core);
	priv->core = NULL;
}

static struct backingstore_template blockps_bst = {
	.bs_name = "blockps",
	.bs_datasize = sizeof(struct blockps_lu_private),
	.bs_open = bs_blockps_open,
	.bs_close = bs_blockps_close,
	.bs_init = bs_blockps_init,
	.bs_exit = bs_blockps_exit,
	.bs_cmd_submit = blockps_cmd_submit,
};

/* The block-device command set of tgt's rdwr store, less UNMAP (tgt's sbc_unmap races with a thread-pool store, and
 * thin provisioning means nothing here). COMPARE AND WRITE never reaches a store in tgt 1.0.85 (it answers INVALID
 * OPCODE itself); it stays listed so the map matches rdwr's. */
static unsigned char blockps_opcodes[] = {
	ALLOW_MEDIUM_REMOVAL, COMPARE_AND_WRITE, FORMAT_UNIT, INQUIRY, MAINT_PROTOCOL_IN,
	MODE_SELECT, MODE_SELECT_10, MODE_SENSE, MODE_SENSE_10, ORWRITE_16,
	PERSISTENT_RESERVE_IN, PERSISTENT_RESERVE_OUT, PRE_FETCH_10, PRE_FETCH_16,
	READ_10, READ_12, READ_16, READ_6, READ_CAPACITY, RELEASE, REPORT_LUNS, REQUEST_SENSE,
	RESERVE, SEND_DIAGNOSTIC, SERVICE_ACTION_IN, START_STOP, SYNCHRONIZE_CACHE,
	SYNCHRONIZE_CACHE_16, TEST_UNIT_READY, VERIFY_10, VERIFY_12, VERIFY_16,
	WRITE_10, WRITE_12, WRITE_16, WRITE_6, WRITE_SAME, WRITE_SAME_16,
	WRITE_VERIFY, WRITE_VERIFY_12, WRITE_VERIFY_16,
};

void blockps_register_backing_store(void)
{
	blockps_set_log(log_to_tgtd);
	bs_create_opcode_map(&blockps_bst, blockps_opcodes, ARRAY_SIZE(blockps_opcodes));
	register_backingstore_template(&blockps_bst);
}
