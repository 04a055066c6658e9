/* The hodu program. The language arrives with lang/; until then it reports
 * its version and the runtime it was built with. */
#include "hd_base.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("hodu %s\n", HODU_VERSION);
        return 0;
    }
    fprintf(stderr, "usage: hodu --version\n");
    return 2;
}
