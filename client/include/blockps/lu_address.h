// How one LU is reached, as a cluster file names it and a transport opens it (client/transport/lu_transport.h).
#pragma once

#include <string>
#include <string_view>

namespace blockps {

// How the posix transport submits I/O.
enum class PosixEngine { psync, libaio, io_uring };

inline std::string_view to_string(PosixEngine engine) {
  switch (engine) {
    case PosixEngine::psync:
      return "psync";
    case PosixEngine::libaio:
      return "libaio";
    case PosixEngine::io_uring:
      return "io_uring";
  }
  return "?";
}

// How one LU is reached.
struct LuAddress {
  enum class Kind { iscsi_url, iser_url, device_path };
  Kind kind = Kind::device_path;
  std::string text;  // the URL or the absolute path, as written
};

}  // namespace blockps
