#include "tests/support/scsi_commands.h"

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#include <string>

namespace blockps::testing {

namespace {

// A command libiscsi could not complete (or that was not sent: no session), with libiscsi's reason.
ScsiResult failed(const char* command, iscsi_context* ctx) {
  return ScsiResult{kScsiTransportError, 0, 0,
                    std::string(command) + " failed: " + (ctx != nullptr ? iscsi_get_error(ctx) : "not connected")};
}

}  // namespace

ScsiResult test_unit_ready(IscsiLun& lun) {
  iscsi_context* ctx = lun.native_handle();
  scsi_task* task = ctx != nullptr ? iscsi_testunitready_sync(ctx, lun.lun()) : nullptr;
  if (task == nullptr) return failed("TEST UNIT READY", ctx);
  ScsiResult r;
  r.status = task->status;
  if (task->status == SCSI_STATUS_CHECK_CONDITION) {
    r.sense_key = task->sense.key;
    r.asc = task->sense.ascq;  // libiscsi keeps ASC << 8 | ASCQ here
  } else if (task->status >= kScsiTransportCancelled) {
    r.message = iscsi_get_error(ctx);
  }
  scsi_free_scsi_task(task);
  return r;
}

ScsiResult lun_reset(IscsiLun& lun) {
  iscsi_context* ctx = lun.native_handle();
  if (ctx == nullptr || iscsi_task_mgmt_lun_reset_sync(ctx, lun.lun()) != 0) return failed("LUN RESET", ctx);
  return {};
}

}  // namespace blockps::testing
