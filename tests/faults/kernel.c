/* A saxpy kernel with one fault per MODE, for the fault-injection suite (test_faults.py).
   GOOD and FAST are correct (GOOD does useless work first); every other MODE is a fault
   (FORK is correct, and slow too, but leaves a child running).
   COMPILE_HANG includes HANG_INCLUDE (a FIFO nobody writes), defined by the test. */
#define _GNU_SOURCE
#include <link.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MODE
#define MODE 0
#endif

#define GOOD 0
#define SEGFAULT 1
#define ABORT 2
#define EXIT 3
#define SPIN 4
#define HEAP_OVERFLOW 5
#define WRONG 6
#define NAN_OUT 7
#define FORK 8
#define LEAK_THREAD 9
#define MEMORY_BOMB 10
#define GARBAGE 11
#define PARTIAL_HEADER 12
#define NO_COMPILE 13
#define FAST 14
#define COMPILE_HANG 15

#if MODE == COMPILE_HANG
#include HANG_INCLUDE
#endif

static int count_objects(struct dl_phdr_info *info, size_t size, void *data) {
    (void)info; (void)size;
    ++*(int *)data;
    return 0;
}

static int loaded_objects(void) {
    int n = 0;
    dl_iterate_phdr(count_objects, &n);
    return n;
}

/* Waits until another shared library is loaded into the process (the next candidate),
   then crashes it: the fault shows while someone else runs. */
static void *crash_when_the_next_loads(void *arg) {
    int before = (int)(long)arg;
    while (loaded_objects() <= before) usleep(200);
    volatile int *p = NULL;
    *p = 1;
    return NULL;
}

/* Writes bytes into every socket the process holds: the worker's result channel among them. */
static void write_into_sockets(const char *bytes, size_t n) {
    for (int fd = 3; fd < 1024; fd++) {
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) {
            ssize_t ignored = write(fd, bytes, n);
            (void)ignored;
        }
    }
}

void saxpy(const float *x, float *y, float a, int n) {
#if MODE == SEGFAULT
    volatile int *p = NULL; *p = 1;
#elif MODE == ABORT
    abort();
#elif MODE == EXIT
    exit(1);
#elif MODE == SPIN
    volatile int spin = 1; while (spin) {}
#elif MODE == HEAP_OVERFLOW
    char *volatile small = malloc(16);
    memset(small, 0x5a, (size_t)1 << 34);  /* runs off the heap's end */
    y[0] += small[1 << 20];
    free(small);
#elif MODE == FORK
    static int forked = 0;
    if (!forked) {
        forked = 1;
        if (fork() == 0) { for (;;) pause(); }
    }
#elif MODE == LEAK_THREAD
    static int started = 0;
    if (!started) {
        started = 1;
        pthread_t t;
        pthread_create(&t, NULL, crash_when_the_next_loads, (void *)(long)loaded_objects());
        pthread_detach(t);
    }
#elif MODE == MEMORY_BOMB
    for (;;) {
        char *volatile chunk = malloc(64 << 20);
        if (!chunk) abort();
        memset(chunk, 1, 64 << 20);
    }
#elif MODE == GARBAGE
    write_into_sockets("not a reply", 11);
#elif MODE == PARTIAL_HEADER
    write_into_sockets("TTr1\0\0", 6);
    volatile int spin = 1; while (spin) {}
#elif MODE == NO_COMPILE
    this does not compile;
#endif
#if MODE == GOOD || MODE == FORK
    volatile float sink = 0;
    for (int r = 0; r < 20000; r++) sink += (float)r;
#endif
#if MODE == WRONG
    for (int i = 0; i < n; i++) y[i] = a * x[i];
#elif MODE == NAN_OUT
    for (int i = 0; i < n; i++) y[i] = NAN;
#else
    for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i];
#endif
}
