// DistributedSampler with PyTorch's exact index sequence (see the header), so a run sharded by
// dtrain visits the same samples per rank and epoch as torch.utils.data.DistributedSampler.
#include "dtrain/data/sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "dtrain/error.h"

namespace dtrain {
namespace {

void check_world(int64_t size, int world, int rank) {
  if (size < 0) throw Error("dataset size must be >= 0, got " + std::to_string(size));
  if (world < 1) throw Error("world size must be >= 1, got " + std::to_string(world));
  if (rank < 0 || rank >= world) {
    throw Error("rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world) + ")");
  }
}

}  // namespace

DistributedSampler::DistributedSampler(int64_t size, int world, int rank, bool shuffle,
                                       uint64_t seed, bool drop_last)
    : size_(size),
      world_(world),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  check_world(size, world, rank);
  if (drop_last_ && size_ % world_ != 0) {
    num_samples_ = size_ / world_;  // the tail is cut
  } else {
    num_samples_ = (size_ + world_ - 1) / world_;  // padded from the start
  }
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all(static_cast<size_t>(size_));
  if (shuffle_ && size_ > 0) {
    // A fresh generator per call, seeded like Python's `g.manual_seed(seed + epoch)`.
    at::Generator gen = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch_));
    at::Tensor perm = at::randperm(size_, gen, at::TensorOptions().dtype(at::kLong));
    const int64_t* p = perm.data_ptr<int64_t>();
    std::copy(p, p + size_, all.begin());
  } else {
    std::iota(all.begin(), all.end(), int64_t{0});
  }
  const int64_t total = num_samples_ * world_;
  if (total > size_) {
    // Python: indices += (indices * ceil(padding / len(indices)))[:padding], i.e. cycle from
    // the start.
    const int64_t padding = total - size_;
    all.reserve(static_cast<size_t>(total));
    for (int64_t k = 0; k < padding; ++k) {
      const int64_t v = all[static_cast<size_t>(k % size_)];
      all.push_back(v);
    }
  } else {
    all.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += world_) mine.push_back(all[static_cast<size_t>(i)]);
  return mine;
}

std::vector<int64_t> eval_shard(int64_t size, int world, int rank) {
  check_world(size, world, rank);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(size / world + 1));
  for (int64_t i = rank; i < size; i += world) mine.push_back(i);
  return mine;
}

}  // namespace dtrain
