// `nitro` command-line front end. The subcommands (inspect, synth, run, serve) are not written
// yet; until then the binary only prints its usage.
#include <cstdio>

/// Prints usage and exits 0 for --help/-h or no arguments, 2 otherwise.
int main(int argc, char** argv) {
    std::fputs("usage: nitro <command> [options]\n"
               "Nitro-MoE: inference for GGUF Mixture-of-Experts models.\n"
               "No commands are available in this build yet.\n",
               argc > 1 ? stderr : stdout);
    if (argc <= 1) return 0;
    const char* a = argv[1];
    const bool help = (a[0] == '-' && a[1] == 'h' && a[2] == '\0') ||
                      (a[0] == '-' && a[1] == '-' && a[2] == 'h' && a[3] == 'e' && a[4] == 'l' &&
                       a[5] == 'p' && a[6] == '\0');
    return help ? 0 : 2;
}
