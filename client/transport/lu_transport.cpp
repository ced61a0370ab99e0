// The factory of both transports (lu_transport.h): an LU's address picks libiscsi or posix.
#include "client/transport/lu_transport.h"

namespace blockps {

Result<std::unique_ptr<LuTransport>> open_lu_transport(const LuAddress& address, const TransportOptions& options) {
  if (address.kind == LuAddress::Kind::device_path) return open_posix_transport(address.text, options);
  return open_libiscsi_transport(address.text, options);
}

}  // namespace blockps
