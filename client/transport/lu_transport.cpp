// The factory of both transports (lu_transport.h): an LU's address picks libiscsi or posix; and a target's answer as
// a failure.
#include "client/transport/lu_transport.h"

#include "contract/scsi_codes.h"

namespace blockps {

LuFailure LuFailure::answered(std::size_t command, int scsi_status, int sense_key, std::string reason) {
  const StatusCode code = scsi_status == scsi::kReservationConflict ? StatusCode::conflict : StatusCode::io;
  LuFailure f{command, Status::Error(code, std::move(reason))};
  f.scsi_status = scsi_status;
  f.sense_key = sense_key;
  return f;
}

Result<std::unique_ptr<LuTransport>> open_lu_transport(const LuAddress& address, const TransportOptions& options) {
  if (address.kind == LuAddress::Kind::device_path) return open_posix_transport(address.text, options);
  return open_libiscsi_transport(address.text, options);
}

}  // namespace blockps
