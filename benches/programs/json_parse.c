/* A fuzz target for the coverage side-by-side (benches/libxdc/compare.sh): a
 * recursive-descent JSON parser run over N generated documents, one after another,
 * as a fuzzer runs its target over inputs. A system call before each document
 * ends user-space tracing (TIP.PGD) and starts it again (TIP.PGE), so that each
 * parse is a trace of its own, as a fuzzer's trace of one run.
 *
 *   json_parse N [SEED]
 *
 * The inputs are mutations of 64 generated documents (of 1 to 60 KB: objects,
 * arrays, strings with escapes, numbers, literals), as a fuzzer makes them: cut
 * short, bytes changed, pieces of another copied in; so that the runs differ in
 * length and take the parser's error paths too. A run is the parse of one
 * input and the making of the next, as a fuzzer's harness loop.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33) % n;
}

/* ---- the seed documents ---- */

struct buf {
    char *p;
    size_t len, cap;
};

static void put(struct buf *b, char c)
{
    if (b->len + 1 >= b->cap) {
        b->cap = b->cap ? b->cap * 2 : 256;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            exit(1);
    }
    b->p[b->len++] = c;
}

static void puts_(struct buf *b, const char *s)
{
    while (*s)
        put(b, *s++);
}

static void gen_string(struct buf *b)
{
    put(b, '"');
    for (uint32_t i = 0, n = rnd(12); i < n; i++) {
        switch (rnd(10)) {
        case 0:
            puts_(b, "\\n");
            break;
        case 1:
            puts_(b, "\\u00e9");
            break;
        case 2:
            puts_(b, "\\\"");
            break;
        default:
            put(b, (char)('a' + rnd(26)));
        }
    }
    put(b, '"');
}

static void gen_value(struct buf *b, int depth, int budget)
{
    /* A document is an object or an array. */
    uint32_t kind = depth == 0 ? rnd(2) : depth > 6 || budget < 2 ? 2 + rnd(4) : rnd(6);
    switch (kind) {
    case 0:
    case 1: {
        int object = kind == 0;
        put(b, object ? '{' : '[');
        uint32_t n = rnd((uint32_t)(budget < 24 ? budget : 24) + 1);
        for (uint32_t i = 0; i < n; i++) {
            if (i)
                put(b, ',');
            if (rnd(4) == 0)
                put(b, ' ');
            if (object) {
                gen_string(b);
                put(b, ':');
            }
            gen_value(b, depth + 1, budget / (int)(n + 1));
        }
        put(b, object ? '}' : ']');
        break;
    }
    case 2:
        gen_string(b);
        break;
    case 3: {
        char num[32];
        switch (rnd(3)) {
        case 0:
            snprintf(num, sizeof num, "%d", (int)rnd(100000) - 50000);
            break;
        case 1:
            snprintf(num, sizeof num, "%u.%u", rnd(1000), rnd(1000));
            break;
        default:
            snprintf(num, sizeof num, "%ue%d", rnd(100), (int)rnd(20) - 10);
        }
        puts_(b, num);
        break;
    }
    case 4:
        puts_(b, rnd(2) ? "true" : "false");
        break;
    default:
        puts_(b, "null");
    }
}

/* ---- the parser (the code under test) ---- */

struct parser {
    const char *s, *end;
    int depth;
    unsigned strings, numbers, literals, containers, errors;
    uint32_t hash;
};

static void ws(struct parser *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\n' || *p->s == '\t' || *p->s == '\r'))
        p->s++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int string(struct parser *p)
{
    if (p->s >= p->end || *p->s != '"')
        return -1;
    p->s++;
    while (p->s < p->end && *p->s != '"') {
        char c = *p->s++;
        if (c == '\\') {
            if (p->s >= p->end)
                return -1;
            c = *p->s++;
            if (c == 'u') {
                int v = 0;
                for (int i = 0; i < 4; i++) {
                    int h = p->s < p->end ? hexval(*p->s++) : -1;
                    if (h < 0)
                        return -1;
                    v = v << 4 | h;
                }
                c = (char)v;
            } else if (!strchr("\"\\/bfnrt", c)) {
                return -1;
            }
        }
        p->hash = (p->hash ^ (uint8_t)c) * 16777619u;
    }
    if (p->s >= p->end)
        return -1;
    p->s++;
    p->strings++;
    return 0;
}

static int number(struct parser *p)
{
    const char *start = p->s;
    if (p->s < p->end && *p->s == '-')
        p->s++;
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9')
        p->s++;
    if (p->s < p->end && *p->s == '.') {
        p->s++;
        while (p->s < p->end && *p->s >= '0' && *p->s <= '9')
            p->s++;
    }
    if (p->s < p->end && (*p->s == 'e' || *p->s == 'E')) {
        p->s++;
        if (p->s < p->end && (*p->s == '+' || *p->s == '-'))
            p->s++;
        while (p->s < p->end && *p->s >= '0' && *p->s <= '9')
            p->s++;
    }
    if (p->s == start)
        return -1;
    p->numbers++;
    return 0;
}

static int literal(struct parser *p, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(p->end - p->s) < n || memcmp(p->s, word, n) != 0)
        return -1;
    p->s += n;
    p->literals++;
    return 0;
}

static int value(struct parser *p);

static int container(struct parser *p, char open, char close)
{
    if (++p->depth > 64)
        return -1;
    p->s++;
    ws(p);
    if (p->s < p->end && *p->s == close) {
        p->s++;
        p->depth--;
        p->containers++;
        return 0;
    }
    for (;;) {
        ws(p);
        if (open == '{') {
            if (string(p) < 0)
                return -1;
            ws(p);
            if (p->s >= p->end || *p->s++ != ':')
                return -1;
        }
        if (value(p) < 0)
            return -1;
        ws(p);
        if (p->s >= p->end)
            return -1;
        char c = *p->s++;
        if (c == close)
            break;
        if (c != ',')
            return -1;
    }
    p->depth--;
    p->containers++;
    return 0;
}

static int value(struct parser *p)
{
    ws(p);
    if (p->s >= p->end)
        return -1;
    switch (*p->s) {
    case '{':
        return container(p, '{', '}');
    case '[':
        return container(p, '[', ']');
    case '"':
        return string(p);
    case 't':
        return literal(p, "true");
    case 'f':
        return literal(p, "false");
    case 'n':
        return literal(p, "null");
    default:
        return number(p);
    }
}

static int parse(struct parser *p, const char *s, size_t len)
{
    memset(p, 0, sizeof *p);
    p->s = s;
    p->end = s + len;
    p->hash = 2166136261u;
    if (value(p) < 0) {
        p->errors++;
        return -1;
    }
    ws(p);
    return p->s == p->end ? 0 : -1;
}

/* A fuzzer's next input: a base document, now and then cut short, with a few
 * bytes changed and a piece of another base copied in. */
static size_t mutate(struct buf *out, const struct buf *bases, size_t nbases)
{
    const struct buf *b = &bases[rnd((uint32_t)nbases)];
    size_t len = b->len;
    if (out->cap < len + 64) {
        out->cap = len + 64;
        out->p = realloc(out->p, out->cap);
        if (!out->p)
            exit(1);
    }
    memcpy(out->p, b->p, len);
    switch (rnd(8)) {
    case 0:
        len = rnd((uint32_t)len);
        break;
    case 1: {
        const struct buf *o = &bases[rnd((uint32_t)nbases)];
        size_t n = rnd(32), at = rnd((uint32_t)len), from = rnd((uint32_t)o->len);
        if (n > len - at)
            n = len - at;
        if (n > o->len - from)
            n = o->len - from;
        memcpy(out->p + at, o->p + from, n);
        break;
    }
    default:
        for (uint32_t i = 0, n = rnd(4); i < n && len; i++)
            out->p[rnd((uint32_t)len)] = " ,:[]{}\"0123456789aeflnrstu"[rnd(28)];
    }
    return len;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: json_parse N [SEED]\n");
        return 2;
    }
    long n = strtol(argv[1], NULL, 10);
    rng_state = argc > 2 ? strtoull(argv[2], NULL, 10) : 25;
    /* The seed corpus: documents of a few bytes to a few tens of KB. */
    enum { BASES = 64 };
    struct buf bases[BASES] = {{0}};
    for (int i = 0; i < BASES; i++)
        gen_value(&bases[i], 0, 1000 + (int)rnd(60000));
    struct buf input = {0};
    uint32_t sum = 0;
    unsigned ok = 0;
    struct parser p;
    for (long i = 0; i < n; i++) {
        size_t len = mutate(&input, bases, BASES);
        /* The run starts here in a user-space trace: the system call stops it. */
        syscall(SYS_getppid);
        if (parse(&p, input.p, len) == 0)
            ok++;
        sum += p.hash + p.strings + p.numbers + p.literals + p.containers;
    }
    printf("%ld inputs, %u parsed, checksum %08x\n", n, ok, sum);
    return 0;
}
