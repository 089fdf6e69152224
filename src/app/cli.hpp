#pragma once
namespace trident {
// The command line: trident train|check|topology|plan|ckpt ... (see --help).
int cli_main(int argc, char** argv);
}  // namespace trident
