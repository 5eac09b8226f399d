#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int (*volatile fp)(const char *) = puts;
size_t (*volatile lp)(const char *) = strlen;
int main(int argc, char **argv) {
    size_t n = 0;
    for (int i = 0; i < 3; i++) {
        puts("x");
        n += strlen(argv[0]);
        fp("y");
        n += lp(argv[0]);
    }
    return (int)(n & 1);
}
