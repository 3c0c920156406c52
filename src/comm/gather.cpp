#include <cstring>

#include "dtrain/comm.h"
#include "dtrain/error.h"

namespace dtrain {

std::vector<at::Tensor> Communicator::gather(const at::Tensor& t, int root) {
  if (t.dim() != 1) throw Error("gather: needs a 1-D tensor, got " + std::to_string(t.dim()) + " dimensions");
  const at::Tensor lengths = all_gather(at::tensor({t.numel()}, at::kLong).to(t.device())).to(at::kCPU);
  const int64_t longest = lengths.max().item<int64_t>();
  at::Tensor padded = at::zeros({longest}, t.options());
  padded.narrow(0, 0, t.numel()).copy_(t);
  const at::Tensor all = all_gather(padded).to(at::kCPU);  // (world, longest)
  std::vector<at::Tensor> out;
  if (rank() != root) return out;
  for (int r = 0; r < world(); ++r) out.push_back(all[r].narrow(0, 0, lengths[r].item<int64_t>()).clone());
  return out;
}

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
