// zerotrain command line: the only place errors become exit codes (2 bad input, 1 failure).
#include <cstdio>

int main() {
    std::printf("zerotrain %s\n", ZT_VERSION);
    return 0;
}
