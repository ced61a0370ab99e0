// The result of a client operation that has no other value: ok, or a message that says what went wrong.
#pragma once

#include <string>
#include <utility>

namespace blockps {

// The outcome of an operation that has no other result: ok, or an error message that says what went wrong.
class [[nodiscard]] Status {
 public:
  static Status Ok() { return Status{}; }
  static Status Error(std::string message) { return Status{std::move(message)}; }

  bool ok() const { return message_.empty(); }
  const std::string& message() const { return message_; }

 private:
  Status() = default;
  explicit Status(std::string message)
      : message_(message.empty() ? std::string("unspecified error") : std::move(message)) {}
  std::string message_;
};

}  // namespace blockps
