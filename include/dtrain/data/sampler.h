// DistributedSampler with exactly PyTorch's semantics (torch.utils.data.DistributedSampler):
// each epoch, a permutation of [0, size) from a CPU generator seeded with seed + epoch (or
// 0..size-1 without shuffle); then either padded by repeating from the start up to a multiple
// of world, or (drop_last) cut down to one; rank r takes indices[r::world].
// Invariant: for one epoch the ranks' index lists have equal length and, without drop_last,
// together cover every index at least once.
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain {

class DistributedSampler {
 public:
  DistributedSampler(int64_t size, int world, int rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  // Samples this rank gets per epoch.
  int64_t num_samples() const { return num_samples_; }
  // This rank's indices for the current epoch.
  std::vector<int64_t> indices() const;

 private:
  int64_t size_;
  int world_, rank_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
};

// Indices rank r evaluates: r, r + world, ... (no padding, so every sample is counted once).
std::vector<int64_t> eval_shard(int64_t size, int world, int rank);

}  // namespace dtrain
