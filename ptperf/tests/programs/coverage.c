/* Line coverage test program: branches, a loop, a switch, a function that never
   runs, and lines without code. argv[1] steers it. */
#include <stdio.h>
#include <string.h>

static int classify(int c)
{
    if (c >= '0' && c <= '9')
        return 1;
    else if (c >= 'a' && c <= 'z')
        return 2;
    return 3;
}

static int never_called(int x)
{
    int y = x * 3;
    return y + 1;
}

static int sum(const char *s)
{
    int counts[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < strlen(s); i++) {
        switch (classify(s[i])) {
        case 1:
            counts[1]++;
            break;
        case 2:
            counts[2]++;
            break;
        default:
            counts[3]++;
        }
    }
    return counts[1] * 100 + counts[2] * 10 + counts[3];
}

int main(int argc, char **argv)
{
    const char *input = argc > 1 ? argv[1] : "abc";
    int r = sum(input);
    if (r > 1000)
        r = never_called(r);
    printf("%d\n", r);
    return 0;
}
