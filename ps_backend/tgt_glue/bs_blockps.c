/*
 * tgt glue for blockps: the only file that includes tgt's headers. It registers `--bstype blockps`, turns tgt's
 * LU life cycle and commands into calls of the C++ core (lu_abi.h), and sets the SCSI result the core chose.
 * Commands run on tgt's per-LU I/O thread pool (bs_thread), so tgtd's main thread never does the math.
 * mode=sync grad LUs first ask the core whether a READ/WRITE must wait for a round (it is then held with tgt's
 * asynchronous completion, never by blocking a pool thread) and watch an eventfd for when held ones may go on.
 * Every command a job's claim fences (grad-LU READ/WRITE, weights-LU writes) and every status-LU WRITE (control
 * lines) hands its sender (session and initiator name) to the core the same way first.
 */
#include <sys/epoll.h>
#include <sys/wait.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "list.h"
#include "util.h"
#include "tgtd.h"
#include "scsi.h"
#include "spc.h"
#include "bs_thread.h"
#include "driver.h"
#include "target.h"

#include "ps_backend/tgt_glue/lu_abi.h"

/* Private LU data: tgt's thread-pool state must come first (BS_THREAD_I assumes it). */
struct blockps_lu_private {
	struct bs_thread_info thread_info;
	struct blockps_lu *core;
	int wake_fd; /* registered with tgt's event loop, or -1 */
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

static void blockps_request(struct scsi_cmd *cmd)
{
	struct blockps_command c;
	struct blockps_outcome o;
	char message[BLOCKPS_MESSAGE_BYTES];

	c.handle = cmd;
	c.cdb = cmd->scb;
	c.offset = cmd->offset;
	c.transfer_length = cmd->tl;
	c.in = scsi_get_in_buffer(cmd);
	c.in_length = scsi_get_in_length(cmd);
	c.out = scsi_get_out_buffer(cmd);
	c.out_length = scsi_get_out_length(cmd);
	/* On failure the outcome is already HARDWARE ERROR, INTERNAL TARGET FAILURE: only the reason is left to log. */
	check_core(cmd->dev, blockps_lu_execute(lu_private(cmd->dev)->core, &c, &o, message, sizeof(message)), message);
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

static int parked_session_alive(int tid, uint64_t itn_id);

static int blockps_cmd_submit(struct scsi_cmd *cmd)
{
	struct blockps_lu_private *priv = lu_private(cmd->dev);
	enum blockps_admission admission;
	struct blockps_worker worker;
	char message[BLOCKPS_MESSAGE_BYTES];
	char id[512];

	if (!blockps_lu_needs_admission(priv->core, cmd->scb))
		return bs_thread_cmd_submit(cmd);
	worker.tid = cmd->c_target->tid;
	worker.itn_id = cmd->cmd_itn_id;
	worker.iqn = initiator_name(cmd, id, sizeof(id));
	worker.alive = parked_session_alive;
	if (blockps_lu_admit(priv->core, cmd, cmd->scb, cmd->offset, cmd->tl, &worker, &admission, message,
			     sizeof(message)) != BLOCKPS_OK) {
		/* Refused, never run unchecked: tgt answers HARDWARE ERROR, INTERNAL TARGET FAILURE. */
		eprintf("blockps: LU %" PRIu64 ": refused command 0x%02x of %s: %s\n", cmd->dev->lun, cmd->scb[0],
			worker.iqn, message);
		return -1;
	}
	if (admission == BLOCKPS_ADMIT_PARKED) {
		set_cmd_async(cmd);
		return 0;
	}
	return bs_thread_cmd_submit(cmd);
}

static int parked_session_alive(int tid, uint64_t itn_id)
{
	return it_nexus_lookup(tid, itn_id) != NULL;
}

static int parked_aborted(const void *handle)
{
	return ((const struct scsi_cmd *)handle)->mreq != NULL;
}

static void parked_resubmit(const void *handle)
{
	bs_thread_cmd_submit((struct scsi_cmd *)handle);
}

static void parked_fail(const void *handle, const struct blockps_outcome *o)
{
	struct scsi_cmd *cmd = (struct scsi_cmd *)handle;

	set_outcome(cmd, o);
	target_cmd_io_done(cmd, o->status);
}

static const struct blockps_parked_ops parked_ops = {
	.alive = parked_session_alive,
	.aborted = parked_aborted,
	.resubmit = parked_resubmit,
	.fail = parked_fail,
};

static void blockps_wake(int fd, int events, void *data)
{
	struct scsi_lu *lu = data;
	char message[BLOCKPS_MESSAGE_BYTES];

	check_core(lu, blockps_lu_on_wake(lu_private(lu)->core, &parked_ops, message, sizeof(message)), message);
}

static tgtadm_err bs_blockps_init(struct scsi_lu *lu, char *bsopts)
{
	struct blockps_lu_private *priv = lu_private(lu);
	char message[BLOCKPS_MESSAGE_BYTES];
	enum blockps_result r;
	tgtadm_err ret;

	priv->wake_fd = -1;
	r = blockps_lu_configure(bsopts, 1U << lu->blk_shift, &priv->core, message, sizeof(message));
	if (r != BLOCKPS_OK) {
		eprintf("blockps: refused LU %" PRIu64 ": %s\n", lu->lun, message);
		return r == BLOCKPS_UNKNOWN_OPTION ? TGTADM_UNKNOWN_PARAM : TGTADM_INVALID_REQUEST;
	}
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
	priv->wake_fd = -1;
	if (blockps_lu_attach(priv->core, path, size, message, sizeof(message)) != BLOCKPS_OK) {
		eprintf("blockps: refused LU %" PRIu64 " on %s: %s\n", lu->lun, path, message);
		return -1;
	}
	wake_fd = blockps_lu_wake_fd(priv->core);
	if (wake_fd >= 0) {
		if (tgt_event_add(wake_fd, EPOLLIN, blockps_wake, lu) != 0) {
			eprintf("blockps: refused LU %" PRIu64 " on %s: cannot watch its eventfd\n", lu->lun, path);
			check_core(lu, blockps_lu_detach(priv->core, message, sizeof(message)), message);
			return -1;
		}
		priv->wake_fd = wake_fd;
	}
	snprintf(lu->attrs.vendor_id, sizeof(lu->attrs.vendor_id), "%s", "BLOCKPS");
	snprintf(lu->attrs.product_id, sizeof(lu->attrs.product_id), "%s", blockps_lu_product_id(priv->core));
	return 0;
}

static void bs_blockps_close(struct scsi_lu *lu)
{
	struct blockps_lu_private *priv = lu_private(lu);
	char message[BLOCKPS_MESSAGE_BYTES];

	if (priv->wake_fd >= 0) {
		check_core(lu, blockps_lu_fail_parked(priv->core, &parked_ops, message, sizeof(message)), message);
		tgt_event_del(priv->wake_fd);
	}
	priv->wake_fd = -1;
	check_core(lu, blockps_lu_detach(priv->core, message, sizeof(message)), message);
}

static void bs_blockps_exit(struct scsi_lu *lu)
{
	struct blockps_lu_private *priv = lu_private(lu);

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

#ifndef BLOCKPS_GLUE_UNIT_TEST /* the glue's unit test includes this file into its own program, not tgtd */
#ifndef BLOCKPS_TGT_VERSION
#error "BLOCKPS_TGT_VERSION: the version of the tgt source this glue is compiled against (ps_backend/CMakeLists.txt)"
#endif

extern char **environ;

/* The running tgtd's version, as `tgtd --version` of this very executable prints it, into `out` (NUL-terminated,
 * without the newline); 0, or -1 when it could not be learned. posix_spawn, not fork: tgtd may have threads. */
static int running_tgtd_version(char *out, size_t size)
{
	char *argv[] = {"tgtd", "--version", NULL};
	posix_spawn_file_actions_t actions;
	int fds[2], status = 0, rc;
	size_t got = 0;
	pid_t pid;

	if (size == 0 || pipe2(fds, O_CLOEXEC) != 0)
		return -1;
	posix_spawn_file_actions_init(&actions);
	posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
	posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
	rc = posix_spawn(&pid, "/proc/self/exe", &actions, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&actions);
	close(fds[1]);
	if (rc != 0) {
		close(fds[0]);
		return -1;
	}
	while (got + 1 < size) {
		ssize_t n = read(fds[0], out + got, size - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	out[got] = '\0';
	out[strcspn(out, "\r\n")] = '\0';
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 && out[0] != '\0' ? 0 : -1;
}

/* The glue reads and writes tgt's internal structs (scsi_cmd, scsi_lu, bs_thread_info) as the source of
 * BLOCKPS_TGT_VERSION lays them out: in a tgtd of another version that would corrupt memory, so the module
 * refuses to register there, in one line naming both versions (scripts/ps-up.sh shows it). */
static int built_for_this_tgtd(void)
{
	char running[128];

	if (running_tgtd_version(running, sizeof running) != 0) {
		eprintf("blockps: NOT LOADED: could not learn this tgtd's version (`%s --version` failed); the module "
			"is built for tgt %s and refuses to guess\n", "/proc/self/exe", BLOCKPS_TGT_VERSION);
		return 0;
	}
	if (strcmp(running, BLOCKPS_TGT_VERSION) != 0) {
		eprintf("blockps: NOT LOADED: this module is built for tgt %s (its source's structs), the running tgtd "
			"is %s: rebuild it against this tgt (scripts/setup.sh BUILD fetches the matching source; then "
			"cmake --build BUILD && cmake --install BUILD --component tgt_module)\n",
			BLOCKPS_TGT_VERSION, running);
		return 0;
	}
	return 1;
}
#endif

/* tgtd dlopens every file in its backing-store directory and calls this (bs.c). Not a constructor as well:
 * registering twice corrupts tgt's template list. */
__attribute__((visibility("default"))) void register_bs_module(void);
void register_bs_module(void)
{
	/* The block-device command set of tgt's rdwr store, less UNMAP (tgt's sbc_unmap races with a thread-pool
	 * store, and thin provisioning means nothing here). COMPARE AND WRITE never reaches a store in tgt 1.0.85
	 * (it answers INVALID OPCODE itself); it stays listed so the map matches rdwr's. */
	static unsigned char opcodes[] = {
		ALLOW_MEDIUM_REMOVAL, COMPARE_AND_WRITE, FORMAT_UNIT, INQUIRY, MAINT_PROTOCOL_IN,
		MODE_SELECT, MODE_SELECT_10, MODE_SENSE, MODE_SENSE_10, ORWRITE_16,
		PERSISTENT_RESERVE_IN, PERSISTENT_RESERVE_OUT, PRE_FETCH_10, PRE_FETCH_16,
		READ_10, READ_12, READ_16, READ_6, READ_CAPACITY, RELEASE, REPORT_LUNS, REQUEST_SENSE,
		RESERVE, SEND_DIAGNOSTIC, SERVICE_ACTION_IN, START_STOP, SYNCHRONIZE_CACHE,
		SYNCHRONIZE_CACHE_16, TEST_UNIT_READY, VERIFY_10, VERIFY_12, VERIFY_16,
		WRITE_10, WRITE_12, WRITE_16, WRITE_6, WRITE_SAME, WRITE_SAME_16,
		WRITE_VERIFY, WRITE_VERIFY_12, WRITE_VERIFY_16,
	};

#ifndef BLOCKPS_GLUE_UNIT_TEST
	if (!built_for_this_tgtd())
		return; /* --bstype blockps stays unknown to this tgtd: every LU of ours is refused */
#endif
	blockps_set_log(log_to_tgtd);
	bs_create_opcode_map(&blockps_bst, opcodes, ARRAY_SIZE(opcodes));
	register_backingstore_template(&blockps_bst);
}
