/*
 * The glue bs_blockps.c with tgt's side stubbed (SPDK style: include the unit under test, stub what it calls),
 * so its parked-command life cycle runs without tgtd. The stubs record what the glue hands to tgt; the C++ core
 * behind lu_abi.h is the real one. Driven from test_bs_blockps.cpp through bs_blockps_ut.h.
 */
#include "tests/unit/ps_backend/tgt_glue/bs_blockps_ut.h"

#include <pthread.h>
#include <stdarg.h>
#include <string.h>

/* Every execution of a command, in the pool or on the main thread, is counted (fate.executed): the glue's calls of
 * the core's execute go through ut_execute. */
#define blockps_lu_execute ut_execute
#include "ps_backend/tgt_glue/bs_blockps.c"
#undef blockps_lu_execute
enum blockps_result blockps_lu_execute(struct blockps_lu* lu, const struct blockps_command* cmd,
                                       const struct blockps_admitted* admitted, struct blockps_outcome* outcome,
                                       char* message, size_t message_size);

/* tgt's list.h takes offsetof through a null pointer, which clang's UndefinedBehaviorSanitizer reports (the fuzz
 * build, tests/fuzz/fuzz_command.cpp): the compiler's own gives the same value. */
#undef offsetof
#define offsetof(TYPE, MEMBER) __builtin_offsetof(TYPE, MEMBER)

struct ut_cmd {
  struct scsi_cmd cmd; /* first: the glue's handle is the scsi_cmd */
  uint8_t cdb[16];
  uint8_t* data;
  struct ut_fate fate;
};

static struct ut_cmd* ut_of(struct scsi_cmd* cmd) { return (struct ut_cmd*)cmd; }

enum blockps_result ut_execute(struct blockps_lu* lu, const struct blockps_command* cmd,
                               const struct blockps_admitted* admitted, struct blockps_outcome* outcome, char* message,
                               size_t message_size) {
  ut_of((struct scsi_cmd*)cmd->handle)->fate.executed++;
  return blockps_lu_execute(lu, cmd, admitted, outcome, message, message_size);
}

/* ---- tgt as the glue sees it ---- */

static struct backingstore_template* registered_bst;
static LIST_HEAD(pool_queue);
static LIST_HEAD(sched_events); /* tgt's scheduled events: run by its loop pass (ut_run_sched_events) */
/* The fds on tgt's event loop: one per attached LU that parks commands. */
enum { UT_MAX_WATCHED = 16 };
static struct {
  int fd;
  event_handler_t handler;
  void* data;
} watched[UT_MAX_WATCHED];
static int watched_count;
static struct scsi_lu* ut_lu; /* the LU of ut_lu_init (the single-LU calls) */
static struct target ut_target = {.tid = 1, .lid = 0};
static struct it_nexus* ut_nexus = (struct it_nexus*)&ut_target; /* any non-NULL pointer: never dereferenced */
enum { UT_MAX_ENDED = 64 };
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
  info->request_fn = rfn;
  return TGTADM_SUCCESS;
}

void bs_thread_close(struct bs_thread_info* info) { info->request_fn = NULL; }

int bs_thread_cmd_submit(struct scsi_cmd* cmd) {
  list_add_tail(&cmd->bs_list, &pool_queue);
  set_cmd_async(cmd);
  ut_of(cmd)->fate.queued++;
  return 0;
}

void tgt_init_sched_event(struct event_data* evt, sched_event_handler_t sched_handler, void* data) {
  evt->sched_handler = sched_handler;
  evt->scheduled = 0;
  evt->data = data;
  INIT_LIST_HEAD(&evt->e_list);
}

void tgt_add_sched_event(struct event_data* evt) {
  if (!evt->scheduled) {
    evt->scheduled = 1;
    list_add_tail(&evt->e_list, &sched_events);
  }
}

void tgt_remove_sched_event(struct event_data* evt) {
  if (evt->scheduled) {
    evt->scheduled = 0;
    list_del_init(&evt->e_list);
  }
}

int ut_run_sched_events(void) {
  struct event_data *ev, *next;
  int ran = 0;

  list_for_each_entry_safe(ev, next, &sched_events, e_list) {
    tgt_remove_sched_event(ev);
    ev->sched_handler(ev);
    ran++;
  }
  return ran;
}

int tgt_event_add(int fd, int events, event_handler_t handler, void* data) {
  if (watched_count == UT_MAX_WATCHED) return -1;
  watched[watched_count].fd = fd;
  watched[watched_count].handler = handler;
  watched[watched_count].data = data;
  watched_count++;
  return 0;
}

void tgt_event_del(int fd) {
  int i;

  for (i = 0; i < watched_count; i++)
    if (watched[i].fd == fd) {
      watched[i] = watched[--watched_count];
      return;
    }
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

static struct scsi_lu* lu_of(struct ut_lu* lu) { return (struct scsi_lu*)lu; }

struct ut_lu* ut_lu_new(const char* bsopts, unsigned blk_shift, enum ut_init* init) {
  char* opts = bsopts ? strdup(bsopts) : NULL;
  struct scsi_lu* lu;
  tgtadm_err ret;
  enum ut_init told;

  blockps_register_backing_store(); /* not tgtd's entry point (bs_blockps_module.c): no tgtd version here */
  lu = calloc(1, sizeof(struct scsi_lu) + registered_bst->bs_datasize);
  lu->lun = 1;
  lu->blk_shift = blk_shift;
  lu->bst = registered_bst;
  ret = registered_bst->bs_init(lu, opts);
  free(opts);
  told = ret == TGTADM_SUCCESS           ? UT_INIT_OK
         : ret == TGTADM_UNKNOWN_PARAM   ? UT_INIT_UNKNOWN_PARAM
         : ret == TGTADM_INVALID_REQUEST ? UT_INIT_INVALID_REQUEST
                                         : UT_INIT_OTHER;
  if (init) *init = told;
  if (told == UT_INIT_OK) return (struct ut_lu*)lu;
  free(lu);
  return NULL;
}

/* bs_open on `path` as tgt's path update does it: 0 attached (the LU keeps the path). */
static int open_path(struct scsi_lu* lu, const char* path) {
  char* p = strdup(path);
  uint64_t size = 0;
  int fd = -1;
  int ret;

  ret = lu->bst->bs_open(lu, p, &fd, &size);
  if (ret == 0) {
    lu->size = size;
    lu->path = p;
  } else {
    free(p);
  }
  return ret;
}

int ut_lu_attach(struct ut_lu* handle, const char* path) {
  struct scsi_lu* lu = lu_of(handle);
  int ret = open_path(lu, path);

  if (ret != 0) {
    lu->bst->bs_exit(lu); /* tgt calls bs_exit, not bs_close, when bs_open fails */
    free(lu);
  }
  return ret;
}

/* tgt frees the path before bs_close. */
static void close_path(struct scsi_lu* lu) {
  if (!lu->path) return;
  free(lu->path);
  lu->path = NULL;
  lu->bst->bs_close(lu);
}

int ut_lu_reopen(struct ut_lu* handle) {
  struct scsi_lu* lu = lu_of(handle);
  char* path;
  int ret;

  if (!lu->path) return -1;
  path = strdup(lu->path);
  close_path(lu);
  ret = open_path(lu, path);
  free(path);
  return ret;
}

void ut_lu_delete(struct ut_lu* handle) {
  struct scsi_lu* lu = lu_of(handle);

  close_path(lu);
  lu->bst->bs_exit(lu);
  free(lu);
}

void ut_lu_wake(struct ut_lu* handle) {
  int i;

  ut_run_sched_events(); /* tgt's loop pass runs them too */
  for (i = 0; i < watched_count; i++)
    if (watched[i].data == handle) {
      watched[i].handler(watched[i].fd, EPOLLIN, watched[i].data);
      return;
    }
}

enum ut_init ut_lu_init(const char* bsopts) {
  enum ut_init init;

  ended_count = 0;
  ut_lu = lu_of(ut_lu_new(bsopts, 9, &init));
  return init;
}

int ut_lu_open(const char* path) {
  int ret = ut_lu_attach((struct ut_lu*)ut_lu, path);

  if (ret != 0) ut_lu = NULL;
  return ret;
}

void ut_lu_close(void) {
  if (!ut_lu) return;
  ut_lu_delete((struct ut_lu*)ut_lu);
  ut_lu = NULL;
}

int ut_wake_fd_watched(void) { return watched_count > 0; }

void ut_wake(void) {
  int i;

  ut_run_sched_events(); /* tgt's loop pass runs them too */
  /* A handler does not add or remove watched fds (only bs_open and bs_close do). */
  for (i = 0; i < watched_count; i++) watched[i].handler(watched[i].fd, EPOLLIN, watched[i].data);
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

static uint64_t be(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  int i;

  for (i = 0; i < bytes; i++) v = v << 8 | p[i];
  return v;
}

/* tgt 1.0.85's scsi_rw_offset and scsi_rw_count (scsi.c): the LBA and the block count of a CDB. */
static uint64_t cdb_lba(const uint8_t* cdb) {
  switch (cdb[0]) {
    case READ_6:
    case WRITE_6:
      return (uint64_t)(cdb[1] & 0x1f) << 16 | be(cdb + 2, 2);
    case READ_10:
    case PRE_FETCH_10:
    case WRITE_10:
    case VERIFY_10:
    case WRITE_VERIFY:
    case WRITE_SAME:
    case SYNCHRONIZE_CACHE:
    case READ_12:
    case WRITE_12:
    case VERIFY_12:
    case WRITE_VERIFY_12:
      return be(cdb + 2, 4);
    case READ_16:
    case PRE_FETCH_16:
    case WRITE_16:
    case ORWRITE_16:
    case VERIFY_16:
    case WRITE_VERIFY_16:
    case WRITE_SAME_16:
    case SYNCHRONIZE_CACHE_16:
    case COMPARE_AND_WRITE:
      return be(cdb + 2, 8);
  }
  return 0;
}

static uint32_t cdb_blocks(const uint8_t* cdb) {
  switch (cdb[0]) {
    case READ_6:
    case WRITE_6:
      return cdb[4] ? cdb[4] : 256;
    case READ_10:
    case PRE_FETCH_10:
    case WRITE_10:
    case VERIFY_10:
    case WRITE_VERIFY:
    case WRITE_SAME:
    case SYNCHRONIZE_CACHE:
      return (uint32_t)be(cdb + 7, 2);
    case READ_12:
    case WRITE_12:
    case VERIFY_12:
    case WRITE_VERIFY_12:
      return (uint32_t)be(cdb + 6, 4);
    case READ_16:
    case PRE_FETCH_16:
    case WRITE_16:
    case ORWRITE_16:
    case VERIFY_16:
    case WRITE_VERIFY_16:
    case WRITE_SAME_16:
    case SYNCHRONIZE_CACHE_16:
      return (uint32_t)be(cdb + 10, 4);
    case COMPARE_AND_WRITE:
      return cdb[13];
  }
  return 0;
}

/* A WRITE whose data-out tgt cuts to the transfer length. */
static int sbc_write(uint8_t op) {
  switch (op) {
    case WRITE_6:
    case WRITE_10:
    case WRITE_12:
    case WRITE_16:
    case WRITE_VERIFY:
    case WRITE_VERIFY_12:
    case WRITE_VERIFY_16:
      return 1;
  }
  return 0;
}

/* Whether tgt's sbc_rw hands the command to the store (it sets offset and transfer length then). */
static int sbc_rw_command(uint8_t op) {
  switch (op) {
    case READ_6:
    case READ_10:
    case READ_12:
    case READ_16:
    case PRE_FETCH_10:
    case PRE_FETCH_16:
    case ORWRITE_16:
    case WRITE_SAME:
    case WRITE_SAME_16:
    case COMPARE_AND_WRITE:
      return 1;
  }
  return sbc_write(op);
}

struct ut_cmd* ut_cmd_new_cdb(struct ut_lu* lu, uint64_t itn_id, const uint8_t* cdb, size_t cdb_len,
                              const uint8_t* data, uint32_t data_length, int data_out, struct ut_cmd* reuse) {
  struct ut_cmd* c = reuse ? reuse : malloc(sizeof(*c));
  struct scsi_lu* dev = lu_of(lu);
  uint64_t lba;
  uint32_t blocks;

  if (reuse) free(reuse->data);
  memset(c, 0, sizeof(*c));
  memcpy(c->cdb, cdb, cdb_len < sizeof(c->cdb) ? cdb_len : sizeof(c->cdb));
  c->data = calloc(1, data_length ? data_length : 1);
  if (data && data_length) memcpy(c->data, data, data_length);
  c->cmd.scb = c->cdb;
  c->cmd.scb_len = (int)cdb_len;
  c->cmd.dev = dev;
  c->cmd.c_target = &ut_target;
  c->cmd.cmd_itn_id = itn_id;
  c->cmd.it_nexus = ut_nexus;
  INIT_LIST_HEAD(&c->cmd.bs_list);
  lba = cdb_lba(c->cdb);
  blocks = cdb_blocks(c->cdb);
  if (sbc_rw_command(c->cdb[0])) {
    /* WRITE SAME of 0 blocks: to the end of the LU (tgt computes it from the LBA, unchecked here). */
    if ((c->cdb[0] == WRITE_SAME || c->cdb[0] == WRITE_SAME_16) && blocks == 0)
      blocks = (uint32_t)((dev->size >> dev->blk_shift) - lba);
    c->cmd.offset = lba << dev->blk_shift;
    c->cmd.tl = blocks << dev->blk_shift;
  } else if (c->cdb[0] == VERIFY_10 || c->cdb[0] == VERIFY_12 || c->cdb[0] == VERIFY_16) {
    c->cmd.offset = lba << dev->blk_shift;
  }
  if (data_out) {
    scsi_set_out_buffer(&c->cmd, c->data);
    scsi_set_out_length(&c->cmd, sbc_write(c->cdb[0]) && c->cmd.tl < data_length ? c->cmd.tl : data_length);
  } else {
    scsi_set_in_buffer(&c->cmd, c->data);
    scsi_set_in_length(&c->cmd, data_length);
  }
  return c;
}

const uint8_t* ut_cmd_data(const struct ut_cmd* c) { return c->data; }

void ut_cmd_free(struct ut_cmd* c) {
  free(c->data);
  free(c);
}

int ut_submit(struct ut_cmd* c) {
  int ret = c->cmd.dev->bst->bs_cmd_submit(&c->cmd);

  /* tgt's target_cmd_queue: a command the store took and did not make asynchronous is done, GOOD (sbc.c). */
  if (ret == 0 && !cmd_async(&c->cmd)) {
    c->fate.ran_here = 1;
    target_cmd_io_done(&c->cmd, SAM_STAT_GOOD);
  }
  return ret;
}

void ut_abort(struct ut_cmd* c) { c->cmd.mreq = (struct mgmt_req*)&ut_target; /* only compared with NULL */ }

void ut_end_session(uint64_t itn_id) {
  if (ended_count < UT_MAX_ENDED) ended_sessions[ended_count++] = itn_id;
}

/* One pool thread's work on `cmd`: its LU's request function, then tgt's completion with the result it set. */
static void run_queued(struct scsi_cmd* cmd) {
  list_del_init(&cmd->bs_list);
  ((struct bs_thread_info*)BS_THREAD_I(cmd->dev))->request_fn(cmd);
  ut_of(cmd)->fate.pool_runs++;
  target_cmd_io_done(cmd, scsi_get_result(cmd));
}

int ut_run_pool(void) {
  int ran = 0;

  while (!list_empty(&pool_queue)) {
    run_queued(list_first_entry(&pool_queue, struct scsi_cmd, bs_list));
    ran++;
  }
  return ran;
}

int ut_run_pool_one(size_t index) {
  struct scsi_cmd* cmd;

  list_for_each_entry(cmd, &pool_queue, bs_list) {
    if (index-- == 0) {
      run_queued(cmd);
      return 1;
    }
  }
  return 0;
}

size_t ut_pool_queued(void) {
  struct scsi_cmd* cmd;
  size_t n = 0;

  list_for_each_entry(cmd, &pool_queue, bs_list) n++;
  return n;
}

void ut_reset(void) {
  ended_count = 0;
  pthread_mutex_lock(&log_lock);
  log_count = 0;
  pthread_mutex_unlock(&log_lock);
}

struct ut_fate ut_cmd_fate(const struct ut_cmd* c) {
  struct ut_fate fate = c->fate;
  size_t i;

  fate.async = cmd_async(&c->cmd) != 0;
  fate.sense_left = 0;
  for (i = 0; i < sizeof(c->cmd.sense_buffer); i++) fate.sense_left += c->cmd.sense_buffer[i] != 0;
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
