#include "app/cli.hpp"
namespace trident {
int cli_main(int, char**) { return 0; }
}
