// Which device a rank computes on: the rule Runtime::setup applies and `dtrain env` reports;
// and where the ranks are, as the start-up line says it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "dtrain/config.h"

namespace dtrain::detail {

// GPU local_rank % gpus when there are GPUs and run.device is not cpu; -1 for the CPU. (With
// run.device cuda and no GPU, setup stops with an Error before asking.)
int device_for_rank(DeviceKind device, int local_rank, int gpus);

// The hosts of the ranks (`host_of_rank`, index = rank), each with its ranks as ranges in rank
// order: "2 hosts: n1 (ranks 0-1), n2 (ranks 2-3)"; "1 host: n1 (rank 0)"; past `max_hosts`
// hosts, "... and 3 more hosts".
std::string hosts_of_ranks(const std::vector<std::string>& host_of_rank, size_t max_hosts = 8);

}  // namespace dtrain::detail
