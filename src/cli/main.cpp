// The dtrain command line: dtrain CONFIG.yaml [section.key=value ...]
#include "cli/cli.h"

int main(int argc, char** argv) { return dtrain::cli::main(argc, argv); }
