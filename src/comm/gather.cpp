#include <cstring>

#include "dtrain/comm.h"
#include "dtrain/error.h"

namespace dtrain {

std::vector<std::string> gather_strings(Communicator& comm, const std::string& s) {
  at::Tensor len = at::tensor({static_cast<int64_t>(s.size())}, at::kLong);
  const int64_t max_len = comm.all_gather(len).max().item<int64_t>();
  if (max_len == 0) return std::vector<std::string>(static_cast<size_t>(comm.world()));
  at::Tensor buf = at::zeros({max_len}, at::kByte);
  if (!s.empty()) std::memcpy(buf.data_ptr(), s.data(), s.size());
  const at::Tensor all = comm.all_gather(buf).contiguous();  // (world, max_len)
  std::vector<std::string> out;
  for (int64_t r = 0; r < all.size(0); ++r) {
    const char* p = static_cast<const char*>(all[r].data_ptr());
    out.emplace_back(p, strnlen(p, static_cast<size_t>(max_len)));
  }
  return out;
}

void agree_no_failure(Communicator& comm, const std::string& failure, const std::string& what,
                      const std::string& where) {
  const auto all = gather_strings(comm, failure);
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty())
      throw AgreedError(what + " failed on rank " + std::to_string(r) + ": " + all[r], where,
                        static_cast<int>(r));
}

}  // namespace dtrain
