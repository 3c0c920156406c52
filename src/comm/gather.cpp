// Communicator's defaults built on its own collectives (gather, reduce_scatter_async), the
// argument checks every backend shares, gather_strings and agree_no_failure.
#include <c10/util/Exception.h>

#include <cstring>

#include "comm/collective_checks.h"
#include "dtrain/comm.h"
#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain {

namespace {

// A collective that finished before its call returned.
class DoneWork : public Work {
 public:
  void wait() override {}
};

}  // namespace

void detail::check_reduce_scatter(const at::Tensor& input, const std::vector<int64_t>& counts,
                                  const at::Tensor& output, int rank, int world) {
  if (static_cast<int>(counts.size()) != world)
    throw Error("reduce_scatter: " + std::to_string(counts.size()) + " counts for " +
                std::to_string(world) + " ranks (internal error)");
  int64_t total = 0;
  for (int64_t c : counts) {
    if (c < 0) throw Error("reduce_scatter: a negative count (internal error)");
    total += c;
  }
  if (!input.defined() || input.dim() != 1 || !input.is_contiguous() || input.numel() != total)
    throw Error("reduce_scatter: the input must be 1-D and contiguous with the counts' " +
                std::to_string(total) + " values (internal error)");
  const int64_t mine = counts[static_cast<size_t>(rank)];
  if (mine > 0 && (!output.defined() || output.dim() != 1 || !output.is_contiguous() ||
                   output.numel() != mine || output.scalar_type() != input.scalar_type() ||
                   output.device() != input.device()))
    throw Error("reduce_scatter: the output must be 1-D and contiguous with this rank's " +
                std::to_string(mine) +
                " values, in the input's dtype and on its device (internal error)");
}

std::unique_ptr<Work> Communicator::reduce_scatter_async(const at::Tensor& input,
                                                         const std::vector<int64_t>& counts,
                                                         at::Tensor& output, ReduceOp op) {
  detail::check_reduce_scatter(input, counts, output, rank(), world());
  at::Tensor all = input.clone();
  all_reduce(all, op);
  int64_t offset = 0;
  for (int r = 0; r < rank(); ++r) offset += counts[static_cast<size_t>(r)];
  const int64_t mine = counts[static_cast<size_t>(rank())];
  if (mine > 0) output.copy_(all.narrow(0, offset, mine));
  return std::make_unique<DoneWork>();
}

std::vector<at::Tensor> Communicator::gather(const at::Tensor& t, int root) {
  if (t.dim() != 1)
    throw Error("gather: needs a 1-D tensor, got " + std::to_string(t.dim()) + " dimensions");
  const at::Tensor lengths =
      all_gather(at::tensor({t.numel()}, at::kLong).to(t.device())).to(at::kCPU);
  const int64_t longest = lengths.max().item<int64_t>();
  at::Tensor padded = at::zeros({longest}, t.options());
  padded.narrow(0, 0, t.numel()).copy_(t);
  const at::Tensor all = all_gather(padded).to(at::kCPU);  // (world, longest)
  std::vector<at::Tensor> out;
  if (rank() != root) return out;
  for (int r = 0; r < world(); ++r)
    out.push_back(all[r].narrow(0, 0, lengths[r].item<int64_t>()).clone());
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
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    bool everywhere = all.size() > 1;  // every rank, with the same words: said once, as such
    for (const std::string& f : all) everywhere = everywhere && f == all[r];
    throw AgreedError(what + " failed on " +
                          (everywhere ? std::string("every rank") : "rank " + std::to_string(r)) +
                          ": " + all[r],
                      where, static_cast<int>(r));
  }
}

void agree_no_failure(Communicator& comm, const std::function<void()>& body) {
  std::string failure;
  try {
    body();
  } catch (const c10::Error& e) {
    failure = detail::first_line(e.what_without_backtrace());
  } catch (const std::exception& e) {
    failure = detail::first_line(e.what());
  }
  const auto all = gather_strings(comm, failure);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    bool everywhere = all.size() > 1;
    for (const std::string& f : all) everywhere = everywhere && f == all[r];
    throw AgreedError(all[r] + (everywhere ? " (on every rank)" : ""), {}, static_cast<int>(r));
  }
}

}  // namespace dtrain
