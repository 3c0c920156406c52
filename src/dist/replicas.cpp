#include "dist/replicas.h"

#include <ATen/core/grad_mode.h>

#include <sstream>

#include "dtrain/error.h"
#include "util/format.h"
#include "util/hash.h"

namespace dtrain::detail {
namespace {

// One line per parameter: "name [shape] dtype".
std::string signature(const std::vector<std::string>& names,
                      const std::vector<at::Tensor>& params) {
  std::string sig;
  for (size_t i = 0; i < params.size(); ++i)
    sig += names[i] + " " + shape_str(params[i].sizes().vec()) + " " +
           at::toString(params[i].scalar_type()) + "\n";
  return sig;
}

int64_t positive_hash(uint64_t h) { return static_cast<int64_t>(h & 0x7fffffffffffffffull); }

}  // namespace

void verify_replicas(Communicator& control, uint64_t config_hash,
                     const std::vector<std::string>& names, const std::vector<at::Tensor>& params,
                     int64_t train_size, int64_t test_size) {
  const std::string sig = signature(names, params);
  const int64_t mine[4] = {positive_hash(config_hash), positive_hash(fnv1a(sig)), train_size,
                           test_size};
  at::Tensor local = at::tensor(std::vector<int64_t>(mine, mine + 4), at::kLong);
  at::Tensor all = control.all_gather(local);  // (world, 4)
  auto acc = all.accessor<int64_t, 2>();
  for (int r = 1; r < control.world(); ++r) {
    if (acc[r][0] != acc[0][0]) {
      throw Error("ranks resolved different configs (rank 0 hash " + std::to_string(acc[0][0]) +
                  ", rank " + std::to_string(r) + " hash " + std::to_string(acc[r][0]) +
                  "): every rank must get the same config file and overrides");
    }
    if (acc[r][1] != acc[0][1]) {
      // The first parameter that differs, from every rank's signature.
      const std::vector<std::string> sigs = gather_strings(control, sig);
      std::istringstream a(sigs[0]), b(sigs[r]);
      std::string la, lb;
      int idx = 0;
      while (true) {
        bool ga = static_cast<bool>(std::getline(a, la)),
             gb = static_cast<bool>(std::getline(b, lb));
        if (!ga) la = "(none)";
        if (!gb) lb = "(none)";
        if (la != lb || (!ga && !gb)) break;
        ++idx;
      }
      throw Error("model parameters differ between ranks: parameter #" + std::to_string(idx) +
                  " is '" + la + "' on rank 0 but '" + lb + "' on rank " + std::to_string(r));
    }
    if (acc[r][2] != acc[0][2] || acc[r][3] != acc[0][3]) {
      throw Error("datasets differ between ranks: rank 0 has " + std::to_string(acc[0][2]) +
                  " train / " + std::to_string(acc[0][3]) + " test samples, rank " +
                  std::to_string(r) + " has " + std::to_string(acc[r][2]) + " / " +
                  std::to_string(acc[r][3]));
    }
  }
}

void broadcast_parameters(Communicator& comm, torch::nn::Module& model) {
  at::NoGradGuard no_grad;
  auto send = [&comm](const at::Tensor& t) {
    at::Tensor d = t.detach();
    if (d.numel() == 0) return;
    if (d.is_contiguous()) {
      comm.broadcast(d, 0);
    } else {
      at::Tensor c = d.contiguous();
      comm.broadcast(c, 0);
      d.copy_(c);
    }
  };
  for (auto& p : model.parameters()) send(p);
  for (auto& b : model.buffers()) send(b);
}

}  // namespace dtrain::detail
