// Host memory: the machine's size, and running out of it turned into an Error that names the
// config keys that asked for the memory, the bytes, and what to change, instead of a bare
// std::bad_alloc or LibTorch allocator message.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace dtrain::detail {

// Physical memory of this machine in bytes; 0 when unknown.
int64_t host_memory_bytes();

// Throws an Error naming `keys` when `bytes` (computed in double, so that products of config
// values cannot overflow) is more than this machine's memory: "<what> needs <bytes> of host
// memory, more than this machine's <total>; <remedy>".
void check_host_bytes(double bytes, const std::string& what, const std::string& keys,
                      const std::string& remedy);

// Runs `fn`; when it runs out of host memory (std::bad_alloc, or LibTorch's CPU allocator
// failing) throws an Error naming `keys`, with the bytes asked for when the allocator said, and
// `remedy`. Other exceptions pass through unchanged.
void guard_host_memory(const std::function<void()>& fn, const std::string& what,
                       const std::string& keys, const std::string& remedy);

}  // namespace dtrain::detail
