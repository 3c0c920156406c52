// The `dtrain` command: argument handling, the run, and the error policy (one line per failing
// rank, then the whole job is aborted so that no rank waits forever).
#pragma once

namespace dtrain::cli {
int main(int argc, char** argv);
}
