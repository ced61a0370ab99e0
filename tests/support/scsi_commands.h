// SCSI commands that tests send and the client never does, on an IscsiLun's session (libiscsi's synchronous
// calls: they wait up to the session's timeout). A transport failure is reported and leaves the session as
// libiscsi left it; the test that sees one disconnects.
#pragma once

#include "client/transport/iscsi_lun.h"

namespace blockps::testing {

// TEST UNIT READY.
ScsiResult test_unit_ready(IscsiLun& lun);
// LOGICAL UNIT RESET task management function (aborts every task on the LU, of every session).
ScsiResult lun_reset(IscsiLun& lun);

}  // namespace blockps::testing
