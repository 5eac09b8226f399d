/* Side-by-side harness for libxdc (built by compare.sh from a source folder the
 * user passes; libxdc itself is never part of this repository).
 *
 * Reads what `cargo run --release -p pt-benches --example coverage_compare` exports
 * into DIR:
 *   image.txt   "ADDR SIZE OFFSET" per section of code, bytes in image.bin
 *   filter.txt  up to four "FROM TO" ranges
 *   fuzz.bin + fuzz.idx   the short traces, concatenated; "OFFSET LEN" per trace
 *   long.bin    the long trace
 * and prints one line per workload: MB/s and traces/s on one core, warm (the
 * decoder's caches filled by a first pass) and cold (a fresh decoder), and writes
 * the bitmap of the long trace to long.libxdc.map for the bit-for-bit comparison.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "libxdc.h"

#define MAP_SIZE 0x10000
#define PAGE 4096

struct section {
    uint64_t addr, size;
    uint8_t *bytes;
};

static struct section *sections;
static size_t nsections;
static uint8_t page_buf[PAGE];

static uint8_t *slurp(const char *dir, const char *name, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    /* Room for libxdc's end marker. */
    uint8_t *buf = malloc((size_t)n + 16);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "%s: read failed\n", path);
        exit(1);
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* libxdc's page-fetch callback: it passes an address in the page it wants and
 * takes a pointer to the page's start: a copy of that 4 KiB page from the sections
 * (zeros where none is mapped). */
static void *fetch(void *opaque, uint64_t addr, bool *success)
{
    (void)opaque;
    uint64_t page = addr & ~(uint64_t)(PAGE - 1);
    bool any = false;
    memset(page_buf, 0, PAGE);
    for (size_t i = 0; i < nsections; i++) {
        struct section *s = &sections[i];
        uint64_t lo = page > s->addr ? page : s->addr;
        uint64_t hi = page + PAGE < s->addr + s->size ? page + PAGE : s->addr + s->size;
        if (lo < hi) {
            memcpy(page_buf + (lo - page), s->bytes + (lo - s->addr), hi - lo);
            any = true;
        }
    }
    *success = any;
    return page_buf;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int decode(libxdc_t *x, uint8_t *trace, size_t len)
{
    trace[len] = PT_TRACE_END;
    return libxdc_decode(x, trace, len);
}

int main(int argc, char **argv)
{
    /* --map: only the long trace's bitmap, decoded once (for the bit-for-bit test). */
    bool map_only = argc == 3 && strcmp(argv[1], "--map") == 0;
    if (argc != 2 && !map_only) {
        fprintf(stderr, "usage: %s [--map] DIR\n", argv[0]);
        return 1;
    }
    const char *dir = argv[argc - 1];
    size_t n;
    uint8_t *image = slurp(dir, "image.bin", &n);
    char path[4096];
    snprintf(path, sizeof path, "%s/image.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return 1;
    }
    unsigned long long a, s, o;
    while (fscanf(f, "%llx %llx %llx", &a, &s, &o) == 3) {
        sections = realloc(sections, (nsections + 1) * sizeof *sections);
        sections[nsections++] = (struct section){a, s, image + o};
    }
    fclose(f);
    uint64_t filter[4][2] = {{0}};
    snprintf(path, sizeof path, "%s/filter.txt", dir);
    f = fopen(path, "r");
    if (!f) {
        perror(path);
        return 1;
    }
    for (int i = 0; i < 4 && fscanf(f, "%llx %llx", &a, &s) == 2; i++) {
        filter[i][0] = a;
        filter[i][1] = s;
    }
    fclose(f);

    static uint8_t bitmap[MAP_SIZE];
    if (map_only) {
        size_t long_len;
        uint8_t *longt = slurp(dir, "long.bin", &long_len);
        libxdc_t *x = libxdc_init(filter, fetch, NULL, bitmap, MAP_SIZE);
        int r = decode(x, longt, long_len);
        snprintf(path, sizeof path, "%s/long.libxdc.map", dir);
        f = fopen(path, "wb");
        if (!f || fwrite(bitmap, 1, MAP_SIZE, f) != MAP_SIZE) {
            perror(path);
            return 1;
        }
        fclose(f);
        printf("libxdc: result %d\n", r);
        libxdc_free(x);
        return r == decoder_success ? 0 : 2;
    }
    size_t fuzz_len, idx_len, long_len;
    uint8_t *fuzz = slurp(dir, "fuzz.bin", &fuzz_len);
    uint8_t *idx = slurp(dir, "fuzz.idx", &idx_len);
    uint8_t *longt = slurp(dir, "long.bin", &long_len);
    idx[idx_len] = 0;
    size_t ntraces = 0;
    uint64_t(*traces)[2] = NULL;
    for (char *p = (char *)idx; *p;) {
        unsigned long long off, len;
        int used;
        if (sscanf(p, "%llu %llu%n", &off, &len, &used) != 2)
            break;
        traces = realloc(traces, (ntraces + 1) * sizeof *traces);
        traces[ntraces][0] = off;
        traces[ntraces][1] = len;
        ntraces++;
        p += used;
        while (*p == '\n' || *p == ' ')
            p++;
    }
    /* Each trace in a buffer of its own, as a fuzzer hands them over. */
    uint8_t **bufs = malloc(ntraces * sizeof *bufs);
    size_t fuzz_bytes = 0;
    for (size_t i = 0; i < ntraces; i++) {
        bufs[i] = malloc(traces[i][1] + 16);
        memcpy(bufs[i], fuzz + traces[i][0], traces[i][1]);
        fuzz_bytes += traces[i][1];
    }

    /* (a) the fuzzing workload, warm: one pass to fill the caches, then timed. */
    libxdc_t *x = libxdc_init(filter, fetch, NULL, bitmap, MAP_SIZE);
    int fails = 0;
    for (size_t i = 0; i < ntraces; i++) {
        int r = decode(x, bufs[i], traces[i][1]);
        if (r != decoder_success && fails++ == 0)
            fprintf(stderr, "libxdc: trace %zu: result %d (page fault at %#llx)\n", i, r,
                    (unsigned long long)libxdc_get_page_fault_addr(x));
    }
    double best = 1e30;
    for (int round = 0; round < 3; round++) {
        double t = now();
        for (size_t i = 0; i < ntraces; i++) {
            libxdc_bitmap_reset(x);
            decode(x, bufs[i], traces[i][1]);
        }
        t = now() - t;
        if (t < best)
            best = t;
    }
    printf("libxdc fuzz warm: %zu traces, %.1f MB, %.3f s: %.1f MB/s, %.0f traces/s (%d not decoded)\n",
           ntraces, fuzz_bytes / 1e6, best, fuzz_bytes / 1e6 / best, ntraces / best, fails);
    libxdc_free(x);

    /* (b) the long trace: cold (a fresh decoder) and warm (again). */
    memset(bitmap, 0, MAP_SIZE);
    x = libxdc_init(filter, fetch, NULL, bitmap, MAP_SIZE);
    double t = now();
    int r = decode(x, longt, long_len);
    double cold = now() - t;
    snprintf(path, sizeof path, "%s/long.libxdc.map", dir);
    f = fopen(path, "wb");
    fwrite(bitmap, 1, MAP_SIZE, f);
    fclose(f);
    best = 1e30;
    for (int round = 0; round < 3; round++) {
        libxdc_bitmap_reset(x);
        t = now();
        decode(x, longt, long_len);
        t = now() - t;
        if (t < best)
            best = t;
    }
    printf("libxdc long: %.1f MB, result %d: cold %.3f s %.1f MB/s, warm %.3f s %.1f MB/s\n",
           long_len / 1e6, r, cold, long_len / 1e6 / cold, best, long_len / 1e6 / best);
    libxdc_free(x);
    return 0;
}
