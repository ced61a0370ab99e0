// The worker-PS contract's error vocabulary, used by the client, the aggregator and the PS core alike: a Status
// (ok, or a kind and a message that says what went wrong) and a Result<T> (a value or the Status that prevented
// it). Header-only and dependency-free (docs/ARCHITECTURE.md, "The contract between worker and PS").
#pragma once

#include <cassert>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

namespace blockps {

// What kind of failure a Status is, for callers that branch on it (the client C API's result codes,
// client/include/blockps/blockps.h) rather than on the message. `unknown` is any error made without a kind (on the PS:
// an engine fault, an exception).
enum class StatusCode {
  ok,
  unknown,
  invalid_argument,  // the caller's request is wrong (buffer size, blocks outside the model, a control line,
                     // a file that is not a checkpoint)
  config,            // a cluster file or bsopts cannot be read or say something wrong
  unknown_option,    // bsopts name a key that no option table knows (a config error tgtadm reports apart)
  connect,           // an LU cannot be reached or opened
  io,                // a read or write failed (a shard's LU, a checkpoint file)
  mismatch,          // two descriptions of one shard disagree (cluster file and shard; bsopts and the open
                     // shard or its checkpoint)
  unreachable,       // a shard's session was lost and could not be logged in again within [client] reconnect_s
  conflict,          // another job holds the shard: its claim refused this worker's job at open, or a command
                     // was answered RESERVATION CONFLICT (the shard was taken over)
};

// The outcome of an operation that has no other result: ok, or an error message that says what went wrong.
class [[nodiscard]] Status {
 public:
  static Status Ok() { return Status{}; }
  static Status Error(std::string message) { return Status{StatusCode::unknown, std::move(message)}; }
  static Status Error(StatusCode code, std::string message) { return Status{code, std::move(message)}; }

  bool ok() const { return message_.empty(); }
  const std::string& message() const { return message_; }
  StatusCode code() const { return code_; }

 private:
  Status() = default;
  Status(StatusCode code, std::string message)
      : message_(message.empty() ? std::string("unspecified error") : std::move(message)),
        code_(code == StatusCode::ok ? StatusCode::unknown : code) {}
  std::string message_;
  StatusCode code_ = StatusCode::ok;
};

// strerror's text for an errno value (strerror_r: the client's I/O threads may fail at the same time).
inline std::string errno_message(int err) {
  char buffer[256] = {};
  return ::strerror_r(err, buffer, sizeof buffer);  // the GNU variant: returns the text (maybe not buffer)
}

// A value or the error that prevented it (a Status that is not ok).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}      // NOLINT(google-explicit-constructor): return value;
  Result(Status error) : error_(std::move(error)) {  // NOLINT(google-explicit-constructor): return error;
    if (error_->ok()) error_ = Status::Error("Result built from an ok Status without a value");
  }

  bool ok() const { return value_.has_value(); }
  // Ok when there is a value, else the error.
  Status status() const { return ok() ? Status::Ok() : *error_; }
  const std::string& message() const {
    static const std::string empty;
    return ok() ? empty : error_->message();
  }
  // The value of an ok() Result; asserted, because reaching for it without checking ok() is a bug.
  T& value() & { return (assert(ok()), *value_); }
  const T& value() const& { return (assert(ok()), *value_); }
  T&& value() && { return (assert(ok()), std::move(*value_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::optional<T> value_;
  std::optional<Status> error_;
};

}  // namespace blockps
