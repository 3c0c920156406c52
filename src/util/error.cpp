#include "dtrain/error.h"

#include <mutex>

namespace dtrain {
namespace detail {
namespace {
std::mutex g_identity_mu;
int g_rank = -1;
std::string& host_storage() {
  static std::string host;
  return host;
}
}  // namespace

void set_process_identity(int rank, const std::string& host) {
  std::lock_guard<std::mutex> lock(g_identity_mu);
  g_rank = rank;
  host_storage() = host;
}
int process_rank() {
  std::lock_guard<std::mutex> lock(g_identity_mu);
  return g_rank;
}
const std::string& process_host() {
  std::lock_guard<std::mutex> lock(g_identity_mu);
  return host_storage();
}
}  // namespace detail

namespace {
std::string compose(const std::string& what, const std::string& where) {
  return where.empty() ? what : where + ": " + what;
}
}  // namespace

Error::Error(const std::string& what, std::string where)
    : std::runtime_error(compose(what, where)),
      cause_(what),
      where_(std::move(where)),
      rank_(detail::process_rank()),
      host_(detail::process_host()) {}

}  // namespace dtrain
