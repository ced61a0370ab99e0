/*
 * The glue bs_blockps.c with tgt's side stubbed (SPDK style: include the unit under test, stub what it calls),
 * so its parked-command life cycle runs without tgtd. The stubs record what the glue hands to tgt; the C++ core
 * behind lu_abi.h is the real one. Driven from test_bs_blockps.cpp through bs_blockps_ut.h.
 */
/* Not tgtd: the glue's check of the running tgtd's version does not apply. */
#define BLOCKPS_GLUE_UNIT_TEST 1
#include "tests/unit/ps_backend/glue/bs_blockps_ut.h"

#include <pthread.h>
#include <stdarg.h>
#include <string.h>

#include "ps_backend/tgt_glue/bs_blockps.c"

struct ut_cmd {
  struct scsi_cmd cmd; /* first: the glue's handle is the scsi_cmd */
  uint8_t cdb[16];
  uint8_t* data;
  struct ut_fate fate;
};

static struct ut_cmd* ut_of(struct scsi_cmd* cmd) { return (struct ut_cmd*)cmd; }

/* ---- tgt as the glue sees it ---- */

static struct backingstore_template* registered_bst;
static request_func_t* pool_request_fn;
static LIST_HEAD(pool_queue);
static struct {
  int fd;
  event_handler_t handler;
  void* data;
} watched = {.fd = -1};
static struct scsi_lu* ut_lu;
static struct target ut_target = {.tid = 1, .lid = 0};
static struct it_nexus* ut_nexus = (struct it_nexus*)&ut_target; /* any non-NULL pointer: never dereferenced */
enum { UT_MAX_ENDED = 16 };
static uint64_t ended_sessions[UT_MAX_ENDED];
static int ended_count;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
enum { UT_MAX_LOG_LINES = 256, UT_LOG_LINE_BYTES = 1200 };
static char log_lines[UT_MAX_LOG_LINES][UT_LOG_LINE_BYTES];
static int log_count;

void log_error(const char* fmt, ...) {
  va_list ap;

  pthread_mutex_lock(&log_lock);
  va_start(ap, fmt);
  vsnprintf(log_lines[log_count % UT_MAX_LOG_LINES], UT_LOG_LINE_BYTES, fmt, ap);
  va_end(ap);
  log_count++;
  pthread_mutex_unlock(&log_lock);
}

static int ut_transportid(int tid, uint64_t itn_id, char* buf, int size) {
  return snprintf(buf + 4, size - 4, "iqn.2024-01.test:worker-%" PRIu64, itn_id) + 5;
}

static struct tgt_driver ut_driver = {.name = "ut", .transportid = ut_transportid};
struct tgt_driver* tgt_drivers[] = {&ut_driver, NULL};

int register_backingstore_template(struct backingstore_template* bst) {
  registered_bst = bst;
  return 0;
}

void bs_create_opcode_map(struct backingstore_template* bst, unsigned char* opcodes, int num) {}

tgtadm_err bs_thread_open(struct bs_thread_info* info, request_func_t* rfn, int nr_threads) {
  pool_request_fn = rfn;
  return TGTADM_SUCCESS;
}

void bs_thread_close(struct bs_thread_info* info) { pool_request_fn = NULL; }

int bs_thread_cmd_submit(struct scsi_cmd* cmd) {
  list_add_tail(&cmd->bs_list, &pool_queue);
  set_cmd_async(cmd);
  ut_of(cmd)->fate.queued++;
  return 0;
}

int tgt_event_add(int fd, int events, event_handler_t handler, void* data) {
  watched.fd = fd;
  watched.handler = handler;
  watched.data = data;
  return 0;
}

void tgt_event_del(int fd) {
  if (fd == watched.fd) watched.fd = -1;
}

struct it_nexus* it_nexus_lookup(int tid, uint64_t itn_id) {
  int i;

  for (i = 0; i < ended_count; i++)
    if (ended_sessions[i] == itn_id) return NULL;
  return ut_nexus;
}

void target_cmd_io_done(struct scsi_cmd* cmd, int result) {
  ut_of(cmd)->fate.completed++;
  ut_of(cmd)->fate.result = result;
}

void sense_data_build(struct scsi_cmd* cmd, uint8_t key, uint16_t asc) {
  ut_of(cmd)->fate.sense_built = 1;
  ut_of(cmd)->fate.sense_key = key;
  ut_of(cmd)->fate.asc = asc;
}

void sense_data_build_with_info(struct scsi_cmd* cmd, uint8_t key, uint16_t asc, uint64_t info) {
  sense_data_build(cmd, key, asc);
}

/* ---- the test's side (bs_blockps_ut.h) ---- */

enum ut_init ut_lu_init(const char* bsopts) {
  char* opts = bsopts ? strdup(bsopts) : NULL;
  tgtadm_err ret;

  register_bs_module();
  ended_count = 0;
  ut_lu = calloc(1, sizeof(struct scsi_lu) + registered_bst->bs_datasize);
  ut_lu->lun = 1;
  ut_lu->blk_shift = 9;
  ut_lu->bst = registered_bst;
  ret = registered_bst->bs_init(ut_lu, opts);
  free(opts);
  if (ret == TGTADM_SUCCESS) return UT_INIT_OK;
  free(ut_lu);
  ut_lu = NULL;
  return ret == TGTADM_UNKNOWN_PARAM     ? UT_INIT_UNKNOWN_PARAM
         : ret == TGTADM_INVALID_REQUEST ? UT_INIT_INVALID_REQUEST
                                         : UT_INIT_OTHER;
}

int ut_lu_open(const char* path) {
  char* p = strdup(path);
  uint64_t size = 0;
  int fd = -1;
  int ret;

  ret = ut_lu->bst->bs_open(ut_lu, p, &fd, &size);
  if (ret == 0) {
    ut_lu->size = size;
    ut_lu->path = p;
  } else {
    free(p);
    ut_lu->bst->bs_exit(ut_lu); /* tgt calls bs_exit, not bs_close, when bs_open fails */
    free(ut_lu);
    ut_lu = NULL;
  }
  return ret;
}

void ut_lu_close(void) {
  if (!ut_lu) return;
  free(ut_lu->path); /* tgt frees the path before bs_close */
  ut_lu->path = NULL;
  ut_lu->bst->bs_close(ut_lu);
  ut_lu->bst->bs_exit(ut_lu);
  free(ut_lu);
  ut_lu = NULL;
}

int ut_wake_fd_watched(void) { return watched.fd >= 0; }

void ut_wake(void) {
  if (watched.fd >= 0) watched.handler(watched.fd, EPOLLIN, watched.data);
}

struct ut_cmd* ut_cmd_new(uint64_t itn_id, int is_write, uint64_t offset, uint32_t length) {
  struct ut_cmd* c = calloc(1, sizeof(*c));
  uint32_t lba = (uint32_t)(offset >> 9), blocks = length >> 9;

  c->data = calloc(1, length ? length : 1);
  c->cdb[0] = is_write ? WRITE_10 : READ_10;
  c->cdb[2] = lba >> 24;
  c->cdb[3] = lba >> 16;
  c->cdb[4] = lba >> 8;
  c->cdb[5] = lba;
  c->cdb[7] = blocks >> 8;
  c->cdb[8] = blocks;
  c->cmd.scb = c->cdb;
  c->cmd.scb_len = 10;
  c->cmd.dev = ut_lu;
  c->cmd.c_target = &ut_target;
  c->cmd.cmd_itn_id = itn_id;
  c->cmd.it_nexus = ut_nexus;
  c->cmd.offset = offset; /* as tgt's sbc_rw sets them */
  c->cmd.tl = length;
  INIT_LIST_HEAD(&c->cmd.bs_list);
  if (is_write) {
    scsi_set_out_buffer(&c->cmd, c->data);
    scsi_set_out_length(&c->cmd, length);
  } else {
    scsi_set_in_buffer(&c->cmd, c->data);
    scsi_set_in_length(&c->cmd, length);
  }
  return c;
}

void ut_cmd_free(struct ut_cmd* c) {
  free(c->data);
  free(c);
}

int ut_submit(struct ut_cmd* c) { return ut_lu->bst->bs_cmd_submit(&c->cmd); }

void ut_abort(struct ut_cmd* c) { c->cmd.mreq = (struct mgmt_req*)&ut_target; /* only compared with NULL */ }

void ut_end_session(uint64_t itn_id) {
  if (ended_count < UT_MAX_ENDED) ended_sessions[ended_count++] = itn_id;
}

int ut_run_pool(void) {
  struct scsi_cmd* cmd;
  int ran = 0;

  while (!list_empty(&pool_queue)) {
    cmd = list_first_entry(&pool_queue, struct scsi_cmd, bs_list);
    list_del_init(&cmd->bs_list);
    pool_request_fn(cmd);
    ut_of(cmd)->fate.executed++;
    target_cmd_io_done(cmd, scsi_get_result(cmd));
    ran++;
  }
  return ran;
}

struct ut_fate ut_cmd_fate(const struct ut_cmd* c) {
  struct ut_fate fate = c->fate;

  fate.async = cmd_async(&c->cmd) != 0;
  return fate;
}

int ut_log_count(const char* needle) {
  int i, n = 0, first;

  pthread_mutex_lock(&log_lock);
  first = log_count > UT_MAX_LOG_LINES ? log_count - UT_MAX_LOG_LINES : 0;
  for (i = first; i < log_count; i++)
    if (strstr(log_lines[i % UT_MAX_LOG_LINES], needle)) n++;
  pthread_mutex_unlock(&log_lock);
  return n;
}

void ut_log_last(char* line, size_t size) {
  pthread_mutex_lock(&log_lock);
  snprintf(line, size, "%s", log_count ? log_lines[(log_count - 1) % UT_MAX_LOG_LINES] : "");
  pthread_mutex_unlock(&log_lock);
}
