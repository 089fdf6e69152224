#include "app/cli.hpp"

int main(int argc, char** argv) { return trident::cli_main(argc, argv); }
